"""Publish a report as Prefect artifacts when running inside a flow or task run (a no-op elsewhere).

Three artifacts per report: the Markdown (``<key>``), the summary table per source and level
(``<key>-summary``) and the per-task table (``<key>-tasks``). Keys are slugs of the report title unless given.
Prefect is imported lazily: the GPU image that runs ``bench/seed_corpus_report.py`` has no Prefect.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
MAX_TABLE_ROWS = 1000  # the Prefect UI renders tables client-side; a full KernelBench report is 250 rows/source


def in_prefect_run() -> bool:
    try:
        from prefect.context import FlowRunContext, TaskRunContext
    except ImportError:
        return False
    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def artifact_key(text: str) -> str:
    """Prefect keys allow lowercase letters, digits and dashes only."""
    key = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return (key or "kernelrl-report")[:100]


def task_records(report) -> list[dict[str, Any]]:
    from kernelrl.reports.report import failure_reason

    rows = []
    for s in report.sources:
        for r in s.rows:
            rows.append({"source": s.label, "task": r["task"], "level": r["level"], "kernel": r.get("variant") or "",
                         "speedup": round(float(r["speedup"]), 4), "success": bool(r["success"]),
                         "custom_kernel": bool(r.get("custom_kernel_built")),
                         "techniques": ", ".join(r.get("techniques") or []), "why": failure_reason(r)})
    return rows[:MAX_TABLE_ROWS]


def publish(report, markdown: str | None = None, *, key: str | None = None, force: bool = False) -> list[str]:
    """Create the artifacts when inside a Prefect run (or ``force``); returns the created keys ([] outside)."""
    if not (force or in_prefect_run()):
        return []
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from kernelrl.reports.render import summary_records, to_markdown

    key = artifact_key(key or report.title)
    md = markdown if markdown is not None else to_markdown(report)
    create_markdown_artifact(markdown=md, key=key, description=report.title)
    create_table_artifact(table=summary_records(report), key=f"{key}-summary",
                          description=f"{report.title}: statistics per source and level")
    create_table_artifact(table=task_records(report), key=f"{key}-tasks",
                          description=f"{report.title}: every task")
    return [key, f"{key}-summary", f"{key}-tasks"]


def publish_report_dir(report_dir: str | Path, key: str | None = None) -> list[str]:
    """For flows that ran ``steps.bench`` as a separate process: publish the report it wrote."""
    from kernelrl.reports.report import Report

    d = Path(report_dir)
    report = Report.load(d / "report.json")
    md_path = d / "report.md"
    return publish(report, md_path.read_text() if md_path.exists() else None, key=key)
