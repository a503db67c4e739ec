"""Markdown rendering of a ``Report``: the paper's tables, side by side for every source."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from kernelrl.reports import stats
from kernelrl.reports.report import Report, failure_reason
from kernelrl.reports.techniques import describe

DEFINITIONS = """\
- **success**: executable and correct (the final-evaluation protocol: its correctness inputs and timing budget
  are in the Sources table). Every unsuccessful task counts as speedup **0** in every statistic, as in the paper.
- **speedup**: reference time / kernel time from paired, randomised rounds (the evaluator's protocol): the **reward
  clock**, on CUDA GPU time per call with launch overhead removed on both sides (CUDA-graph replay, the held clock),
  on CPU wall time per call with the harness's fixed overhead removed; the lower bound of a ~95% interval.
- **eager est.** (where a column shows it): the evaluator's eager estimate, KernelBench-style (one eager call timed
  at a time, host dispatch included; median over up to 100 calls per side on one fixed input set), the clock the
  paper and KernelBench report. Report-only: never the reward, and the kernel's own worker times it (a kernel
  could forge it). Its mean and median are over the successful tasks that have one.
- **mean / max / p75 / p50 / p25** over all tasks (unsuccessful = 0); percentiles interpolate linearly between
  closest ranks.
- **faster**: successful with speedup > 1.00.
- **geomean**: geometric mean over the *successful* tasks only (n in brackets); it is not defined with zeros and
  a floor would be arbitrary, so read it together with the success count.
- **custom**: successful kernels whose own CUDA/Triton code built and ran (the evaluator's `custom_kernel_built`),
  as opposed to PyTorch-level rewrites.
- **evaluator flags** are the evaluator's findings (its README lists them); a successful kernel can carry one
  (e.g. `unstable-timing`: the bucket means spread beyond the threshold twice and the score was capped at 1.0).
- **techniques** are detected statically (AST/regex) from the source; a tag says the code contains the
  technique, not that it made the kernel faster (`kernelrl ablate KERNEL.py --task TASK` measures that)."""


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(map(str, header)) + " |", "| " + " | ".join(sep) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    return "\n".join(lines)


SUMMARY_HEADER = ["source", "n", "mean", "max", "p75", "p50", "p25", "success", "faster", "geomean (succ.)",
                  "custom kernels"]


EAGER_HEADER = ["eager est. mean (n)", "eager est. median"]
EAGER_COLUMN = "eager est. (host included, KernelBench-style)"


def eager_cells(s: stats.Summary) -> list[str]:
    """The overall table's eager columns (``EAGER_HEADER``): the estimate's mean with its n, and its median."""
    if not s.eager_n:
        return ["-", "-"]
    return [f"{fmt(s.eager_mean)} (n={s.eager_n})", fmt(s.eager_median)]


def reward_clock(device_types: Sequence[str]) -> str:
    """What a source's speedups were timed on, in a few words (the per-task table's label)."""
    kinds = {"cpu" if d == "cpu" else "gpu" for d in device_types}
    if kinds == {"cpu"}:
        return "CPU wall time, harness overhead removed"
    if kinds == {"gpu"}:
        return "GPU time, launch overhead removed"
    return "GPU time, launch overhead removed; CPU wall time on CPU" if kinds else "the evaluator's clock"


def has_eager(rows) -> bool:
    return any(r.get("eager_speedup") for r in rows)


def summary_cells(label: str, s: stats.Summary) -> list[str]:
    custom = f"{s.custom_kernels}/{s.success}" + (f" ({100 * s.custom_share:.0f}%)"
                                                  if s.custom_share is not None else "")
    gm = f"{fmt(s.geomean)} (n={s.geomean_n})" if s.geomean is not None else "-"
    return [label, str(s.n), fmt(s.mean), fmt(s.max), fmt(s.p75), fmt(s.p50), fmt(s.p25), f"{s.success}/{s.n}",
            f"{s.faster}/{s.n}", gm, custom]


def _sources_table(report: Report) -> str:
    rows = []
    for s in report.sources:
        p = s.protocol or {}
        rows.append([s.label, f"`{s.spec}`", s.unit, ", ".join(s.device_types()) or p.get("device", "-"),
                     ", ".join(s.evaluator_versions()) or "-", fmt(p.get("budget_s"), 1) if p.get("budget_s") else "-",
                     p.get("correctness_trials", "-"), p.get("purpose", "final"), flag_counts(s.rows),
                     "; ".join(s.notes) or ""])
    return table(["source", "spec", "unit", "device", "evaluator", "budget s", "correctness inputs", "scores",
                  "evaluator flags", "notes"], rows, ["l"] * 10)


def flag_counts(rows) -> str:
    """``unstable-timing x8, wrong-output x1``: the evaluator's flags over a source's evaluated kernels."""
    c = Counter(f for r in rows for f in (r.get("flags") or []))
    return ", ".join(f"{f} x{n}" for f, n in c.most_common()) or "-"


def _per_task(report: Report) -> list[str]:
    task_sources = [s for s in report.sources if s.unit == "task"]
    out: list[str] = []
    if task_sources:
        keys: dict[str, tuple[int, str]] = {}
        for s in task_sources:
            for r in s.rows:
                keys.setdefault(r["task_key"], (int(r["level"]), r["task"]))
        by = {s.label: {r["task_key"]: r for r in s.rows} for s in task_sources}
        # Where any source has the eager estimate, every score column names its clock and each such source gets its
        # eager column beside it (issue 32: a reader sets these tables beside published ones); else as before.
        eager = {s.label: has_eager(s.rows) for s in task_sources}
        labelled = any(eager.values())
        header = ["task", "level"]
        for s in task_sources:
            header.append(f"{s.label}: speedup (reward clock: {reward_clock(s.device_types())})" if labelled
                          else s.label)
            if eager[s.label]:
                header.append(f"{s.label}: {EAGER_COLUMN}")
        rows = []
        for key, (level, name) in sorted(keys.items(), key=lambda kv: (kv[1][0], kv[1][1])):
            cells = [name, str(level)]
            for s in task_sources:
                r = by[s.label].get(key)
                if r is None:
                    cells.append("")
                elif r["success"]:
                    tag = " (custom)" if r.get("custom_kernel_built") else ""
                    flags = f" [{', '.join(r['flags'])}]" if r.get("flags") else ""
                    cells.append(f"{fmt(r['speedup'])}{tag}{flags}")
                else:
                    cells.append(f"0 ({failure_reason(r, 40)})")
                if eager[s.label]:
                    cells.append(fmt(r.get("eager_speedup")) if r is not None else "")
            rows.append(cells)
        out += ["## Per task", ""]
        if labelled:
            out += ["The score is the reward clock's; the eager estimate (host included, as the paper and KernelBench "
                    "time a call) stands beside it for comparison with published tables and is never rewarded.", ""]
        out += [table(header, rows, ["l"] + ["r"] * (len(header) - 1)), ""]
    for s in report.sources:
        if s.unit != "kernel":
            continue
        eager = has_eager(s.rows)
        rows = [[r["task"], r["level"], r["variant"], fmt(r["speedup"]) if r["success"] else "0",
                 *([fmt(r.get("eager_speedup"))] if eager else []),
                 "yes" if r["success"] else failure_reason(r, 50), ", ".join(r.get("flags") or []),
                 ", ".join(r.get("techniques") or [])]
                for r in sorted(s.rows, key=lambda r: (r["level"], r["task"], r["variant"]))]
        header = ["task", "level", "kernel", f"speedup (reward clock: {reward_clock(s.device_types())})"
                  if eager else "speedup", *([EAGER_COLUMN] if eager else []), "success", "flags", "techniques"]
        out += [f"## Every kernel: {s.label}", "",
                table(header, rows, ["l", "r", "l", "r", *(["r"] if eager else []), "l", "l", "l"]), ""]
    return out


def _techniques(report: Report) -> list[str]:
    out = ["## Techniques", "",
           "Static tags of the successful kernels: how many use each, and the mean speedup of those that do and "
           "of those that do not.", ""]
    any_rows = False
    for s in report.sources:
        rows = stats.technique_table(s.rows)
        if not rows:
            continue
        any_rows = True
        out += [f"### {s.label}", "", table(
            ["technique", "kernels", "share", "mean speedup", "median", "geomean", "mean without", "what"],
            [[d["technique"], d["count"], f"{100 * d['share']:.0f}%", fmt(d["mean_speedup"]), fmt(d["median_speedup"]),
              fmt(d["geomean_speedup"]), fmt(d["mean_speedup_without"]), describe(d["technique"])] for d in rows],
            ["l", "r", "r", "r", "r", "r", "r", "l"]), ""]
    if not any_rows:
        out += ["(no successful kernels)", ""]
    return out


def _failures(report: Report) -> list[str]:
    out = ["## Unsuccessful", ""]
    any_fail = False
    for s in report.sources:
        fails = [r for r in s.rows if not r["success"]]
        if not fails:
            continue
        any_fail = True
        out += [f"### {s.label} ({len(fails)})", "", table(
            ["task", "kernel", "why"], [[r["task"], r.get("variant") or "", failure_reason(r)] for r in fails],
            ["l", "l", "l"]), ""]
    if not any_fail:
        out += ["(none)", ""]
    return out


def _portability(report: Report) -> list[str]:
    if report.kind != "portability" or len(report.sources) < 2:
        return []
    a, b = report.sources[0], report.sources[1]
    ra = {r["task_key"]: r for r in a.rows}
    rows, ratios = [], []
    for r in sorted(b.rows, key=lambda r: (r["level"], r["task"])):
        x = ra.get(r["task_key"])
        if x is None:
            continue
        ratio = (r["speedup"] / x["speedup"]) if (x["success"] and r["success"]) else None
        if ratio is not None:
            ratios.append(ratio)
        rows.append([r["task"], r["level"], fmt(x["speedup"]), fmt(r["speedup"]), fmt(ratio),
                     "" if r["success"] else failure_reason(r, 50)])
    kept = sum(1 for r in b.rows if r["success"] and ra.get(r["task_key"], {}).get("success") and r["speedup"] > 1)
    both = len(ratios)
    gm = stats.geometric_mean(ratios)
    return ["## Portability", "",
            f"Kernels found on **{a.label}** re-scored on **{b.label}**: {both} successful on both; "
            f"{kept} still faster than the reference; geometric mean of the speedup ratio (second / first) "
            f"{fmt(gm)}.", "",
            table(["task", "level", a.label, b.label, "ratio", "note"], rows, ["l", "r", "r", "r", "r", "l"]), ""]


def to_markdown(report: Report, plot_files: dict[str, str] | None = None) -> str:
    plot_files = plot_files or {}
    summaries = report.summaries()
    lines = [f"# {report.title}", "",
             f"Generated {report.created}" + (f" by `{report.command}`" if report.command else "") + ".",
             f"Suite `{report.suite or '-'}`, levels {', '.join(map(str, report.all_levels())) or '-'}.", ""]
    for n in report.notes:
        lines.append(f"> {n}")
    if report.notes:
        lines.append("")
    lines += ["## Sources", "", _sources_table(report), ""]
    for s in report.sources:
        if s.unit == "kernel":
            lines += [f"*{s.label}* counts kernels, not tasks: every kernel is a row of its statistics.", ""]
    # the eager estimate's mean and median beside the overall numbers, where any source has it (report-only)
    eager = any(g["all"].eager_n for g in summaries.values())
    lines += ["## Overall", "", table(SUMMARY_HEADER + (EAGER_HEADER if eager else []),
                                      [summary_cells(lbl, g["all"]) + (eager_cells(g["all"]) if eager else [])
                                       for lbl, g in summaries.items()]), ""]
    for lvl in report.all_levels():
        key = f"L{lvl}"
        rows = [summary_cells(lbl, g[key]) for lbl, g in summaries.items() if key in g]
        if rows:
            lines += [f"## Level {lvl}", "", table(SUMMARY_HEADER, rows), ""]
    lines += _portability(report)
    if "hist" in plot_files:
        lines += ["## Distribution of log speedup", "",
                  "Histogram of ln(speedup) of the successful kernels, one panel per level (0 = as fast as the "
                  "reference; unsuccessful kernels have no log and are counted in the panel titles).", "",
                  f"![log speedup per level]({plot_files['hist']})", ""]
    if "profile" in plot_files:
        lines += ["Speedup profile: every task's speedup, sorted, per level (unsuccessful at the bottom edge).", "",
                  f"![speedup profile]({plot_files['profile']})", ""]
    lines += _per_task(report)
    lines += _techniques(report)
    lines += _failures(report)
    lines += ["## Definitions", "", DEFINITIONS, ""]
    return "\n".join(lines)


def summary_records(report: Report) -> list[dict[str, Any]]:
    """Flat rows (source x level) for table artifacts and quick JSON consumers."""
    out = []
    for label, groups in report.summaries().items():
        for g, s in groups.items():
            d = {"source": label, "group": g}
            d.update({k: (round(v, 4) if isinstance(v, float) else v) for k, v in s.to_dict().items()})
            out.append(d)
    return out

