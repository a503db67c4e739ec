"""The pipeline's last stage: score the run's best kernels with the final-evaluation protocol and write the report.

    python -m steps.bench --recipe smoke --run NAME [--manifest-out F] [--set bench.budget_s=60] [--dry-run]

For every task of the recipe's suite (``recipe.bench.levels``, ``recipe.task_limit``) it takes the best
successful candidate of the run from the store (whatever stage produced it), re-scores it with the final
protocol (``recipe.bench.budget_s`` seconds of paired timing, ``recipe.bench.correctness_trials`` input sets,
on ``recipe.eval.device``) through the evaluation service (stored with purpose 'final'), and writes the report
(Markdown, CSV/JSON, PNG plots when ``recipe.bench.plots``) to ``<home>/runs/<run>/bench/report``, copied to the
checkpoint store as ``runs/<run>/bench-report``. Tasks without a successful candidate count as 0.

Manifest outputs: ``report`` (Markdown), ``report_json``, ``report_csv``, ``report_dir`` and ``report_uri``
(checkpoint store). Metrics: the overall statistics and each level's mean, success and faster counts.
Inside a Prefect flow the flow publishes the artifacts with
``kernelrl.reports.artifacts.publish_report_dir(outputs["report_dir"])`` (this step runs as its own process).
"""

from __future__ import annotations

import sys

from kernelrl.step import run_step, stage_body

if __name__ == "__main__":
    sys.exit(run_step("bench", stage_body("bench"), description=__doc__.splitlines()[0]))
