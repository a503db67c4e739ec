"""kernelrl: contrastive reinforcement learning that teaches an LLM to write faster GPU kernels."""

__version__ = "0.1.0"

# The evaluator's protocol version, stored with every result (here so that `kernelrl --version` needs no torch).
# Version 2: blocks of paired timed spans that hold only the forward calls (inputs staged and outputs digested
# around them, both parent-timed and charged to the candidate beyond the reference's); the score is the lower
# bound of the interval of the median per-pair ratio, with sequential stopping.
EVALUATOR_VERSION = "kernelrl-eval-2"
