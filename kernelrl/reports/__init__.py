"""Benchmark reports: the paper's tables and figures for any suite and source (``kernelrl bench``).

- ``stats``: pure statistics (mean, max, percentiles, success, faster, geomean, custom-kernel share, histograms)
- ``techniques`` / ``ablation``: static technique tags; source transforms that switch a technique off
- ``sources``: what to score (seeds, a directory, a JSON of task -> code, a run or stage of the store)
- ``scoring``: the final-evaluation protocol through the evaluation service
- ``report`` / ``render`` / ``plots`` / ``artifacts``: the report model, Markdown, PNGs, Prefect artifacts
- ``runner``: ``run_bench`` / ``run_portability``, used by the CLI, ``steps.bench`` and ``bench/``
"""

from kernelrl.reports.report import Report, SourceResult, make_row
from kernelrl.reports.stats import Summary, summarize, summarize_rows

__all__ = ["Report", "SourceResult", "Summary", "make_row", "summarize", "summarize_rows"]
