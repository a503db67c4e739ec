"""KernelBench-wide evaluator check and the paper's baselines (issue 32 item 3): summary.json and a per-task table
from one ``kernelrl bench`` report over the KernelBench suite.

    kernelrl bench --suite kb --source baseline:self --source baseline:compile \\
        --source baseline:compile-reduce-overhead --source baseline:cuda-graph --device cuda --workers 0 --out r/
    python bench/kernelbench_summary.py r/report.json --out bench/results/<date>-<kind>-kernelbench/
    python bench/kernelbench_summary.py lane0/report.json lane1/report.json ... --out ...   # one bench per GPU, merged
    python bench/kernelbench_summary.py --by-created raw/c*/*-report.json.gz --out .   # a folder's calls, in time order

(``kb``: a link to ``../shared/kernelbench`` ignored by git, its level folders named in the device call's carry.)

``baseline:self`` is the reference against itself (``ModelNew(Model)`` changing nothing): the evaluator is
consistent on a task when it scores it within [0.98, 1.02] with no fatal flag. Writes summary.json with ``tasks``,
``self_within_2pct`` (share of tasks), ``self_fatal_flags`` (self-pairs with a fatal flag other than a resource
failure, a reference that ran out of memory or time among those: the evaluator disagreeing with itself), ``failures``
(self-pairs not successful, by cause: memory, time, unsupported inputs, not capturable, wrong output, other),
``median_eval_wall_s``, ``max_eval_wall_s`` (every evaluation of the report), ``baselines`` (per baseline: the
report's own tables, ``kernelrl.reports.stats.summarize_rows``, overall and per level on the evaluator's clock, the
median compile time at the first call, reported apart, and its failures by the same causes, "reference is rounding"
among them),
``evaluator_versions`` (rows per evaluator version: a merge may span a version bump), ``devices`` (evaluated rows
per GPU: a merge across kinds is refused without ``--mixed-devices``), tasks.md, baselines.md (the paper's table per
baseline and level, labelled with its clock) and rows.json.gz:
the merged rows without their code, which a later merge takes as one of its reports (lane reports of a device call
are not kept forever). Without a ``baseline:self`` source the self-pair figures are None and the baselines are
still summarised.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelrl.evaluation.flags import FATAL  # noqa: E402
from kernelrl.reports.stats import percentile, summarize_rows  # noqa: E402  (the report's own tables)
from kernelrl.reports.render import fmt, table  # noqa: E402  (the report's own Markdown cells and tables)

SELF = "the reference itself"
# Failures of resources or set-up (counted by cause under "failures"); every other fatal flag on a self-pair is the
# evaluator disagreeing with itself (wrong output, timing mismatch, reference slowed, ...): "self_fatal_flags"
RESOURCE = {"timeout", "out-of-memory", "build-failed", "crashed", "evaluation-failed", "runtime-error"}


def cause(row: dict) -> str:
    """Why a row failed, in the issue's classes (memory, time, unsupported inputs) and, for the baselines, a forward a
    CUDA graph cannot capture and a wrong output; the rest "other" with its error."""
    text = " ".join([str(row.get("error") or ""), *map(str, row.get("flags") or [])]).lower()
    if "out-of-memory" in text or "out of memory" in text:  # not any "memory": "pinned memory" is a host copy
        return "memory"
    if "timeout" in text or "time limit" in text or "timed out" in text:
        return "time"
    if "unsupported" in text or "dtype" in text or "input" in text and "type" in text:
        return "unsupported inputs"
    if not row.get("evaluated"):
        return "not evaluated"
    if "reference-is-rounding" in (row.get("flags") or []):  # the task's output is float32 rounding (L2 23)
        return "reference is rounding"
    # the CUDA-graph baseline on a forward a graph cannot hold (a host tensor made in forward: L2 83 and 93, L3 30)
    if "during cuda graph capture" in text or "during capturing" in text or "stream is capturing" in text:
        return "not capturable: " + str(row.get("error") or "")[:60]
    if "wrong-output" in (row.get("flags") or []):  # e.g. a replayed graph's dropout mask (L2 66)
        return "wrong output: " + str(row.get("error") or "")[:60]
    return "other: " + (str(row.get("error") or ", ".join(row.get("flags") or [])) or "incorrect")[:80]


def exact(row: dict) -> float:
    """A row's score unrounded: the report's ``score_raw`` where the score is it rounded (a report's ``speedup`` has
    two decimals, rounded toward 1 as the paper's are, up to 0.01 away: 34_InstanceNorm's 0.97629 and
    93_masked_cumsum's 0.97336 both read 0.98, inside [0.98, 1.02]), else the score (a capped one)."""
    score, raw = float(row["speedup"]), row.get("score_raw", (row.get("timing") or {}).get("score_raw"))
    rounded = isinstance(raw, (int, float)) and abs(float(raw) - score) < 0.01 + 1e-9
    return float(raw) if rounded else score


def merge(reports: list[dict]) -> dict:
    """Several reports of one suite (one ``kernelrl bench`` per GPU, each a share of the tasks, or a later run
    finishing what an earlier one's --max-minutes left) as one: per source label, one row per task, an evaluated
    row over a not-evaluated one, the later report's over the earlier's when both were evaluated."""
    labels: list[str] = []
    rows: dict[str, dict[str, dict]] = {}
    for rep in reports:
        for src in rep["sources"]:
            if src["label"] not in rows:
                labels.append(src["label"])
                rows[src["label"]] = {}
            have = rows[src["label"]]
            for r in src["rows"]:
                old = have.get(r["task_key"])
                if old is None or r.get("evaluated") or not old.get("evaluated"):
                    have[r["task_key"]] = r
    return {"sources": [{"label": lab, "rows": list(rows[lab].values())} for lab in labels]}


def slim(report: dict, inputs: list[str]) -> dict:
    """The merged report as a report (``sources``, each with ``label`` and ``rows``) without the candidates' code,
    and the files it came from."""
    return {"inputs": inputs,
            "sources": [{"label": s["label"], "rows": [{k: v for k, v in r.items() if k != "code"} for r in s["rows"]]}
                        for s in report["sources"]]}


def devices(report: dict) -> dict[str, int]:
    """Evaluated rows per GPU (the rows' ``device_type``: "NVIDIA H100 80GB HBM3", "NVIDIA H200", "cpu"; "unknown"
    for rows that do not say). Scores of one task on two kinds of GPU differ by the GPU (2026-12-06: calls asked for
    an H200 came on H100s), so one table holds one kind; main refuses a merge across kinds unless told."""
    return dict(sorted(Counter(str(r.get("device_type") or "unknown") for s in report["sources"] for r in s["rows"]
                               if r.get("evaluated") is not False).items()))


def summarise(report: dict) -> dict:
    sources = {s["label"]: s["rows"] for s in report["sources"]}
    if not sources:
        raise SystemExit("the report has no source")
    # without self-pairs (baseline lanes alone) the self-pair figures are None and the rest is counted over every
    # source; a task the run never reached (--max-minutes) is neither a success nor a failure: listed apart
    ref = sources.get(SELF) or [r for rows in sources.values() for r in rows]
    evaluated = {r["task_key"] for r in ref if r.get("evaluated") is not False}
    not_reached = sorted({r["task_key"] for r in ref if r.get("evaluated") is False} - evaluated)
    sources = {lab: [r for r in rows if r.get("evaluated") is not False] for lab, rows in sources.items()}
    me = sources.get(SELF, [])
    within = [r for r in me if r["success"] and 0.98 <= exact(r) <= 1.02]
    # a reference that ran out of memory or time after the candidate ran is flagged reference-disturbed (against a
    # candidate, whose memory may have crowded it out); on a self-pair it is the evaluator's resource failure,
    # counted under "failures" by its cause, not as the evaluator disagreeing with itself
    fatal = [r for r in me if set(r.get("flags") or []) & (FATAL - RESOURCE) and cause(r) not in ("memory", "time")]
    failures: dict[str, list[str]] = {}
    for r in me:
        if not r["success"]:
            failures.setdefault(cause(r).split(":")[0], []).append(r["task_key"])
    walls = [float(r["wall_s"]) for rows in sources.values() for r in rows if r.get("wall_s")]
    # a merge can span evaluator versions (a lane re-run after a version bump): say how many rows each scored
    versions = Counter(str(r.get("evaluator_version") or "unknown") for rows in sources.values() for r in rows)
    baselines = {}
    for label, rows in sources.items():
        if label == SELF:
            continue
        first = [float((r.get("timing") or {}).get("first_call_s")) for r in rows
                 if (r.get("timing") or {}).get("first_call_s") is not None]
        failed: dict[str, list[str]] = {}  # why a baseline failed, by the self-pairs' causes
        for r in rows:
            if not r["success"]:
                failed.setdefault(cause(r).split(":")[0], []).append(r["task_key"])
        baselines[label] = {"tables": {g: t.to_dict() for g, t in summarize_rows(rows).items()},
                            "first_call_s_median": percentile(first, 0.5) if first else None,
                            "first_call_s_max": max(first, default=None),
                            "failures": {k: {"count": len(v), "tasks": v} for k, v in sorted(failed.items())}}
    return {"tasks": len(me) if SELF in sources else len(evaluated), "not_evaluated": not_reached,
            "self_within_2pct": round(len(within) / len(me), 4) if me else None,
            "self_fatal_flags": len(fatal) if me else None,
            "self_fatal": {r["task_key"]: r.get("flags") for r in fatal},
            "failures": {k: {"count": len(v), "tasks": v} for k, v in sorted(failures.items())},
            "median_eval_wall_s": percentile(walls, 0.5) if walls else None,
            "max_eval_wall_s": max(walls, default=None),
            "evaluations": len(walls), "evaluator_versions": dict(sorted(versions.items())),
            "devices": devices(report), "baselines": baselines,
            "goals": {"self_within_2pct": 0.98, "self_fatal_flags": 0, "max_eval_wall_s": 60.0}}


def _task_order(key: str) -> tuple:
    """kernelbench/L1/10_Name after kernelbench/L1/9_Name: level, then the problem's number."""
    *_, level, name = key.split("/")
    num = name.split("_", 1)[0]
    return (level, int(num) if num.isdigit() else 10**9, name)


def tasks_md(report: dict) -> str:
    sources = [s["label"] for s in report["sources"]]
    by_task: dict[str, dict[str, dict]] = {}
    for s in report["sources"]:
        for r in s["rows"]:
            by_task.setdefault(r["task_key"], {})[s["label"]] = r
    # the self-pair's (or the first source's) evaluator version, spans a block and each worker's peak reserved GPU
    # memory (version 23, large sets only): a merged table spans versions, and the largest tasks' memory is the limit
    lines = ["Each score is the evaluator's (GPU time per call, launch overhead removed on both sides; the lower bound",
             "of its interval, unrounded); in brackets the eager estimate (KernelBench-style, host included, never",
             "rewarded) where the evaluation measured one. wall s, version, spans and peak memory: the self-pair's.",
             "",
             "| task | " + " | ".join(sources) + " | wall s | version | spans | peak GiB ref/cand |",
             "|---|" + "---:|" * (len(sources) + 1) + "---|---:|---|"]
    for key in sorted(by_task, key=_task_order):
        cells = []
        for lab in sources:
            r = by_task[key].get(lab)
            eager = (r or {}).get("eager_speedup")
            cells.append("-" if r is None else "not reached" if r.get("evaluated") is False else
                         f"{exact(r):.3f}" + (f" ({eager:.2f} eager)" if isinstance(eager, (int, float)) else "")
                         if r["success"] else "fail: " + cause(r)[:40])
        first = by_task[key].get(SELF) or by_task[key].get(sources[0]) or {}
        w = first.get("wall_s")
        t = first.get("timing") or {}
        peak = t.get("peak_reserved_mib") or {}
        mem = "/".join(f"{peak[r] / 1024:.1f}" if isinstance(peak.get(r), (int, float)) else "-"
                       for r in ("ref", "cand")) if peak else "-"
        ver = str(first.get("evaluator_version") or "-").removeprefix("kernelrl-eval-")
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {w if w is not None else '-'} | {ver} | "
                     f"{t.get('spans_per_block', '-')} | {mem} |")
    return "\n".join(lines) + "\n"


def baselines_md(s: dict, report: dict) -> str:
    """The paper's table (mean, max, p75, median, p25, success, faster; per level and overall) for each baseline of
    summary ``s``, with the eager estimate and the compile time beside it, labelled, and how many of the table's
    tasks each row covers so far (a table filled call by call says where it stands)."""
    keys = {r["task_key"] for src in report["sources"] for r in src["rows"] if r.get("evaluated") is not False}
    totals = Counter(k.split("/")[-2] for k in keys)  # kernelbench/L1/name -> "L1"
    lines = ["# The paper's baselines on the evaluator's clock", "",
             "Scores are the evaluator's: GPU time per call with launch overhead removed on both sides (CUDA-graph",
             "replay or the held clock), the lower bound of each score's interval; not the paper's or KernelBench's",
             "eager time. `eager est.` is the evaluator's KernelBench-style estimate (host included, one input set,",
             "never rewarded), over the successful tasks that have one. The compile time is the baseline's first",
             "call, reported apart and never timed (none for a CUDA graph, captured without a compile).",
             "Two baselines copy what the reference does not: the reference in a CUDA graph copies each call's",
             "inputs into its graph's static buffers and clones its outputs out, and `torch.compile`",
             "reduce-overhead's graphs copy each input that is not a parameter or buffer into their own. Both copies",
             "are timed (the evaluator replays the reference itself on buffers its harness fills outside the span):",
             "large memory-bound level-1 tasks read 0.3-0.7 under them for it.",
             "`bench/kernelbench_summary.py` writes this file from the folder's rows; `summary.json` holds the same",
             "numbers.", ""]
    if s.get("self_within_2pct") is not None:
        lines += [f"The reference against itself: {s['tasks']} tasks, {s['self_within_2pct']:.3f} within [0.98, 1.02], "
                  f"{s['self_fatal_flags']} fatal flags, "
                  f"{sum(v['count'] for v in s['failures'].values())} failures.", ""]
    rows = []
    for label, b in s.get("baselines", {}).items():
        fails = ", ".join(f"{k} {v['count']}" for k, v in b["failures"].items()) or "-"
        for group, t in b["tables"].items():
            total = sum(totals.values()) if group == "all" else totals.get(group, 0)
            where = "all" if group == "all" else "level " + group.removeprefix("L")
            rows.append([label, f"{where}: {t['n']} of {total}", t["success"], t["faster"],
                         *(fmt(t[k]) for k in ("mean", "max", "p75", "p50", "p25", "geomean")),
                         f"{fmt(t.get('eager_mean'))} / {fmt(t.get('eager_median'))}",
                         f"{fmt(b['first_call_s_median'], 1)} / {fmt(b['first_call_s_max'], 1)}",
                         fails if group == "all" else ""])
    lines.append(table(["baseline", "tasks", "success", "faster", "mean", "max", "p75", "median", "p25", "geomean",
                        "eager est. mean / median", "compile s median / max", "failures"], rows,
                       ["l", "l"] + ["r"] * 8 + ["l"] * 3))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path, nargs="+",
                    help="report.json (or .json.gz) of kernelrl bench over the KernelBench suite, or an earlier "
                    "summary's rows.json.gz (several: merged, later over earlier)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--by-created", action="store_true",
                    help="merge the reports in the order they were made (their 'created' time; a summary's "
                    "rows.json.gz, which has none, first), not the order given: a folder's raw/c*/*-report.json.gz, "
                    "whose names do not sort by time (c15n and c15o at version 24 before c15a and c15b at 25)")
    ap.add_argument("--mixed-devices", action="store_true",
                    help="merge rows of different GPUs into one table (refused without it: a score depends on the GPU)")
    a = ap.parse_args()
    reports = []
    for p in a.report:
        try:
            reports.append(json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text()))
        except (OSError, EOFError, ValueError) as e:  # an empty .gz (a lane with no tasks), a cut file: named
            print(f"error: {p} is not a readable report ({type(e).__name__}: {e}); leave it out", file=sys.stderr)
            return 2
    if a.by_created:  # a stable sort: reports made in the same minute keep the order given
        order = sorted(range(len(reports)), key=lambda i: str(reports[i].get("created") or ""))
        reports, a.report = [reports[i] for i in order], [a.report[i] for i in order]
    report = merge(reports)
    kinds = [d for d in devices(report) if d != "unknown"]
    if len(kinds) > 1 and not a.mixed_devices:
        print(f"error: these reports hold rows of {len(kinds)} kinds of device ({', '.join(kinds)}): one table holds "
              "one kind; summarise each apart, or pass --mixed-devices to merge them all the same", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    s = summarise(report)
    (a.out / "summary.json").write_text(json.dumps(s, indent=1))
    (a.out / "tasks.md").write_text(tasks_md(report))
    (a.out / "baselines.md").write_text(baselines_md(s, report))
    # the merged rows without their code: the input of a later merge (pass rows.json.gz as a report) once the lane
    # reports themselves are gone, and the numbers behind every table here
    (a.out / "rows.json.gz").write_bytes(gzip.compress(json.dumps(slim(report, [str(p) for p in a.report]))
                                                       .encode(), mtime=0))
    print(json.dumps({k: v for k, v in s.items() if k not in ("baselines", "failures", "self_fatal", "not_evaluated")}
                     | {"not_evaluated": len(s["not_evaluated"])}, indent=1))
    if s["max_eval_wall_s"] is not None:
        print(f"wall per evaluation: median {s['median_eval_wall_s']:.1f} s, max {s['max_eval_wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
