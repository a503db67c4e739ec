"""The report model: rows (one per task, or per kernel), sources side by side, JSON/CSV/Markdown/PNG output.

A row is a plain dict (``ROW_FIELDS``); a source is one column of the paper's tables (a run's best kernels, a
stage, the seed corpus, an imported JSON, a baseline ...). ``Report.write(out_dir)`` writes::

    report.md          the tables (overall, per level, per task, techniques, failures) and the plots
    report.json        everything (``Report.load`` reads it back: ``kernelrl bench --compare report.json``)
    tasks.csv          one line per (source, task/kernel)
    hist_log_speedup.png, speedup_profile.png
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.errors import KernelRLError
from kernelrl.reports import stats
from kernelrl.reports.techniques import detect

REPORT_FORMAT = 1
ROW_FIELDS = [
    "source", "task_key", "task", "level", "variant", "origin", "success", "executable", "correct", "speedup",
    "flags", "custom_kernel_built", "techniques", "device_type", "evaluator_version", "candidate_id",
    "evaluation_id", "evaluated", "score_raw", "error", "eager_speedup", "eager_ref_ms", "eager_cand_ms",
]


def eager_fields(result: dict[str, Any], success: bool) -> dict[str, float | None]:
    """The evaluator's eager estimate of a successful kernel (``timing.eager``: KernelBench-style per-call times,
    host included; report-only, never the reward), as ``eager_speedup``, ``eager_ref_ms``, ``eager_cand_ms``; None
    where it was not measured (older results, an unsuccessful kernel, the phase failed or was skipped)."""
    e = (result.get("timing") or {}).get("eager") if success else None
    out: dict[str, float | None] = {"eager_speedup": None, "eager_ref_ms": None, "eager_cand_ms": None}
    if isinstance(e, dict):
        for key, name in (("eager_speedup", "speedup"), ("eager_ref_ms", "ref_ms"), ("eager_cand_ms", "cand_ms")):
            v = e.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
                out[key] = float(v)
    return out


def make_row(*, source: str, task_key: str, task: str, level: int, result: dict[str, Any] | None,
             code: str | None, variant: str = "", origin: str = "", candidate_id: int | None = None,
             error: str | None = None) -> dict[str, Any]:
    """A report row from an evaluation result dict (``EvalResult.to_dict()`` + ids) or from a missing one."""
    r = result or {}
    speedup = float(r.get("speedup") or 0.0)
    if math.isnan(speedup):
        speedup = 0.0
    # the evaluator's own verdict when it gives one (fatal integrity flags make it False), and always > 0
    success = bool(r.get("success", True)) and bool(r.get("executable")) and bool(r.get("correct")) and speedup > 0
    return {
        "source": source,
        "task_key": task_key,
        "task": task,
        "level": int(level),
        "variant": variant,
        "origin": origin,
        "success": success,
        "executable": bool(r.get("executable")),
        "correct": bool(r.get("correct")),
        "speedup": speedup if success else 0.0,
        "raw_speedup": speedup,
        "flags": list(r.get("flags") or []),
        "custom_kernel_built": r.get("custom_kernel_built"),
        "techniques": detect(code) if code else [],
        "device_type": r.get("device_type"),
        "evaluator_version": r.get("evaluator_version"),
        "candidate_id": r.get("candidate_id", candidate_id),
        "evaluation_id": r.get("evaluation_id"),
        "evaluated": result is not None,
        "error": error if error is not None else r.get("error"),
        "timing": r.get("timing") or {},
        "wall_s": r.get("wall_s"),  # the evaluation's wall time (set-up, correctness, timing), not a timed span
        # the evaluator's uncapped median ratio (diagnostic: e.g. what an unstable-timing result would have said)
        "score_raw": (r.get("timing") or {}).get("score_raw"),
        # beside the score, never instead of it: the eager clock the paper and KernelBench report (eager_fields)
        **eager_fields(r, success),
    }


def failure_reason(row: dict[str, Any], width: int = 90) -> str:
    """One short line: why a row is not successful."""
    if row.get("success"):
        return ""
    if row.get("error"):
        text = str(row["error"]).strip().splitlines()[0] if str(row["error"]).strip() else "error"
    elif row.get("flags"):
        text = "flagged: " + ", ".join(map(str, row["flags"]))
    elif not row.get("evaluated"):
        text = "not evaluated"
    elif not row.get("executable"):
        text = "not executable"
    elif not row.get("correct"):
        text = "incorrect"
    else:
        text = "speedup 0"
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass
class SourceResult:
    label: str
    spec: str
    rows: list[dict[str, Any]]
    unit: str = "task"  # "task": one row per task of the suite (missing = unsuccessful); "kernel": one per kernel
    notes: list[str] = field(default_factory=list)
    protocol: dict[str, Any] = field(default_factory=dict)  # budget_s, correctness_trials, device, purpose ...
    provenance: dict[str, Any] = field(default_factory=dict)  # a policy source's checkpoint, prompt, pool, seeds

    def summaries(self) -> dict[str, stats.Summary]:
        return stats.summarize_rows(self.rows)

    def device_types(self) -> list[str]:
        return sorted({str(r["device_type"]) for r in self.rows if r.get("device_type")})

    def evaluator_versions(self) -> list[str]:
        return sorted({str(r["evaluator_version"]) for r in self.rows if r.get("evaluator_version")})


@dataclass
class Report:
    title: str
    sources: list[SourceResult]
    suite: str = ""
    levels: list[int] = field(default_factory=list)
    command: str = ""
    kind: str = "bench"  # bench | portability
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))

    # -- model --------------------------------------------------------------------------------------------
    def all_levels(self) -> list[int]:
        found = {int(r["level"]) for s in self.sources for r in s.rows}
        return sorted(found | set(self.levels)) if found else sorted(self.levels)

    def summaries(self) -> dict[str, dict[str, stats.Summary]]:
        return {s.label: s.summaries() for s in self.sources}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = REPORT_FORMAT
        d["summaries"] = {label: {g: s.to_dict() for g, s in groups.items()}
                          for label, groups in self.summaries().items()}
        d["log_speedup_histograms"] = self.histograms()
        return d

    def histograms(self, width: float = 0.25) -> dict[str, dict[str, dict[str, list]]]:
        """The data of the histogram plot: per source and level, counts of ln(speedup) of successful kernels
        over shared bin edges (width ``width``), plus how many were unsuccessful (no log)."""
        logs = {s.label: {lvl: stats.log_speedups([r["speedup"] for r in s.rows if int(r["level"]) == lvl],
                                                  [r["success"] for r in s.rows if int(r["level"]) == lvl])
                          for lvl in self.all_levels()} for s in self.sources}
        edges = stats.log_bins([v for by in logs.values() for vs in by.values() for v in vs], width)
        return {s.label: {f"L{lvl}": {"edges": edges, "counts": stats.histogram(logs[s.label][lvl], edges),
                                      "unsuccessful": sum(1 for r in s.rows if int(r["level"]) == lvl
                                                          and not r["success"])}
                          for lvl in self.all_levels()} for s in self.sources}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        if d.get("format") != REPORT_FORMAT or "sources" not in d:
            raise KernelRLError("not a kernelrl report JSON (missing format/sources)")
        sources = [SourceResult(**{k: v for k, v in s.items() if k in SourceResult.__dataclass_fields__})
                   for s in d["sources"]]
        kw = {k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "sources"}
        return cls(sources=sources, **kw)

    @classmethod
    def load(cls, path: str | Path) -> Report:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            raise KernelRLError(f"{p}: no such report JSON") from None
        except (OSError, ValueError) as e:
            raise KernelRLError(f"{p}: cannot read a report JSON ({e})") from None
        try:
            return cls.from_dict(data)
        except KernelRLError as e:
            raise KernelRLError(f"{p}: {e}") from None

    def add_compared(self, other: Report, origin: str) -> None:
        """Append another report's sources (labels made unique), keeping where they came from."""
        taken = {s.label for s in self.sources}
        for s in other.sources:
            label = s.label
            i = 2
            while label in taken:
                label = f"{s.label} ({i})"
                i += 1
            taken.add(label)
            rows = [dict(r, source=label) for r in s.rows]
            self.sources.append(SourceResult(label, s.spec, rows, s.unit, [*s.notes, f"from {origin}"], s.protocol))

    # -- output -------------------------------------------------------------------------------------------
    def write(self, out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """Write report.md, report.json, tasks.csv and (with matplotlib) the PNG plots; returns their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        plot_files: dict[str, str] = {}
        if plots:
            try:
                from kernelrl.reports import plots as plotting
            except ImportError as e:  # matplotlib missing (e.g. a bare GPU image): tables still get written
                self.notes.append(f"plots skipped: {e}")
            else:
                for name, path in plotting.write_plots(self, out).items():
                    paths[name] = path
                    plot_files[name] = path.name
        paths["json"] = out / "report.json"
        _atomic_write(paths["json"], json.dumps(self.to_dict(), indent=1, default=str))
        paths["csv"] = out / "tasks.csv"
        _write_csv(paths["csv"], self)
        from kernelrl.reports.render import to_markdown

        paths["markdown"] = out / "report.md"
        _atomic_write(paths["markdown"], to_markdown(self, plot_files))
        return paths


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _csv_value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return ";".join(map(str, v))
    if v is None:
        return ""
    if isinstance(v, str):
        return v.strip().splitlines()[0][:300] if v.strip() else ""
    return v


def _write_csv(path: Path, report: Report) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ROW_FIELDS, extrasaction="ignore")
        w.writeheader()
        for s in report.sources:
            for r in s.rows:
                w.writerow({k: _csv_value(r.get(k)) for k in ROW_FIELDS})
    tmp.replace(path)
