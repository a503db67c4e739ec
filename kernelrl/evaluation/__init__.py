"""The evaluator: sandboxed, paired, randomised, statistically robust speedup (see README.md here)."""

from kernelrl.evaluation.api import EVALUATOR_VERSION, EvalResult, EvaluatorError, compare, evaluate
from kernelrl.evaluation.flags import CAPPED, FATAL, FLAGS
from kernelrl.evaluation.precompile import precompile
from kernelrl.evaluation.static import static_flags
from kernelrl.evaluation.stats import bucket_stats, round_toward_one

static_checks = static_flags  # the name other packages were told about: flags from the source alone

__all__ = ["CAPPED", "EVALUATOR_VERSION", "EvalResult", "EvaluatorError", "FATAL", "FLAGS", "bucket_stats", "compare",
           "evaluate", "precompile", "round_toward_one", "static_checks", "static_flags"]
