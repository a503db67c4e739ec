"""Evaluator benchmark: repeatability, agreement with a longer run, over-claim, wall time and throughput of the
reward, on honest seed candidates spanning microsecond kernels to ~50 ms ones.

    python bench/evaluator_bench.py --device cuda --out-dir bench/results/DATE-h100-evaluator            # all
    python bench/evaluator_bench.py --device cuda --out-dir DIR --only 0:12 --max-minutes 9             # a slice
    python bench/evaluator_bench.py --summarize DIR                      # rows.jsonl -> summary.json + table.md
    python bench/evaluator_bench.py --device cuda --out-dir DIR --resume --max-minutes 9    # go on where DIR stopped
    python bench/evaluator_bench.py --compare OLD_DIR NEW_DIR > DIR/old-vs-new.md     # per task, two versions
    python bench/evaluator_bench.py --device cpu --out-dir /tmp/b --only 0:2 --repeats 2 --long-factor 3  # smoke

Candidates (``candidates()``): one honest seed per built-in task (the GPU seed where there is one, else the
plain-PyTorch 'faster' seed), plus scaled copies of three level-3 tasks (long GRU/LSTM sequences, a bigger
transformer block) so that the slow end (tens of ms per call) is covered. Each candidate is evaluated
``--repeats`` times, each time in fresh worker processes with the evaluator's default settings (sequential
stopping, budget cap ``--budget-s``), then once with ``--long-factor`` x the median timing time of those runs
and no early stop: the reference value. One JSON row per task is appended to DIR/rows.jsonl as soon as it is
done (a run cut short keeps what it measured); ``--summarize`` (also run at the end) writes summary.json and
table.md from every row in the folder.

Summary keys (issue 13 targets in brackets):
  repeatability_within_2pct  share of tasks whose repeats' reported scores (unrounded lower bounds) agree within
                             2%, max/min - 1                                                         [>= 0.90]
  repeatability_worst        the largest max/min - 1                                                   [<= 0.05]
  agreement_within_3pct      share of tasks whose median reported score is within 3% of the long run's
                             estimate                                                                  [>= 0.90]
  over_claim_worst           max over all repeats of (reported score / long-run estimate - 1)          [<= 0.03]
  honest_capped_share        share of honest repeats flagged unstable-timing, capped, failed or fatal  [<= 0.05]
  median_eval_wall_s         median wall time of a warm evaluation (levels 1-2; the first, cold, repeat
                             of each candidate left out)                                              [<= 8]
  max_eval_wall_s            the longest evaluation of any task                                        [<= 60]
  evals_per_gpu_hour         3600 / mean wall time of warm evaluations, all tasks                     [>= 450]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import re
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelrl.config.recipes import with_overrides  # noqa: E402
from kernelrl.config.stages import EvalConfig  # noqa: E402
from kernelrl.errors import ConfigError  # noqa: E402
from kernelrl.evaluation import CAPPED, FATAL, EVALUATOR_VERSION, evaluate  # noqa: E402
from kernelrl.tasks import load_seeds, load_suite  # noqa: E402
from kernelrl.step import parse_sets  # noqa: E402
from kernelrl.tasks.loader import Task  # noqa: E402

# Scaled copies of built-in tasks (module-level sizes overridden): the slow end of the range on a GPU (tens of ms
# per call from long Python-stepped recurrences), with outputs of a few MB. (A first choice, GRU batch 64 x 1024
# steps x hidden 512, had 134 MB outputs: 20 correctness trials shipping them took minutes on the H100 host.)
SCALED = [
    ("04_GRU", {"batch_size": 16, "seq_len": 512, "hidden_size": 256}),
    ("03_LSTM", {"batch_size": 16, "seq_len": 512, "hidden_size": 256}),
    ("06_TransformerBlock", {"batch_size": 2, "seq_len": 1024}),
]


def scaled(task: Task, sizes: dict) -> Task:
    src = task.source
    for name, value in sizes.items():
        src, n = re.subn(rf"(?m)^{name} = .*$", f"{name} = {value!r}", src)
        if n != 1:
            raise ValueError(f"{task.key}: no module-level '{name} = ...' to scale")
    tag = "_".join(f"{k}{v}" for k, v in sizes.items())
    return dataclasses.replace(task, key=f"{task.key}@{tag}", name=f"{task.name}@scaled", source=src)


def pick_seed(task: Task, device: str):
    seeds = load_seeds(task)
    gpu = [s for s in seeds if s.device == "cuda" and s.expect == "faster"]
    fast = [s for s in seeds if s.expect == "faster" and s.device == "any"]
    chosen = gpu if device.startswith("cuda") and gpu else fast
    return chosen[0] if chosen else None


def candidates(device: str) -> list[tuple[Task, object]]:
    """GPU seeds first (on CUDA), then the other built-in tasks' plain seeds, then the scaled tasks."""
    tasks = load_suite("builtin")
    out = [(t, pick_seed(t, device)) for t in tasks]
    out = [(t, s) for t, s in out if s is not None and t.name != "05_Gemm_Max_Subtract_GELU"]  # input-independent
    out.sort(key=lambda ts: (ts[1].device != "cuda", ts[0].key))
    by_name = {t.name: t for t in tasks}
    for name, sizes in SCALED:
        t = scaled(by_name[name], sizes)
        out.append((t, pick_seed(by_name[name], device)))
    return out


def prebuild(cands, cfg: EvalConfig, device: str) -> dict:
    """Build every candidate's load_inline extensions ahead, in parallel, into the evaluator's compile cache (the
    service's compile-ahead does the same while it times other jobs): the repeats then time evaluation, not
    nvcc. Returns the wall time and each build's seconds (the cold cost a first evaluation would pay)."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelrl.evaluation.precompile import pin_cuda_arch, precompile

    pin_cuda_arch(device)
    todo = [(t, s) for t, s in cands if "load_inline" in s.source or "cpp_extension" in s.source]
    t0 = time.monotonic()

    def build(ts):
        t1 = time.monotonic()
        r = precompile(ts[1].source, cfg, device)
        return ts[0].key, {"ok": r.get("ok"), "s": round(time.monotonic() - t1, 1)}

    with ThreadPoolExecutor(max_workers=8) as ex:
        builds = dict(ex.map(build, todo))
    return {"wall_s": round(time.monotonic() - t0, 1), "builds": builds}


def one(task: Task, source: str, cfg: EvalConfig) -> dict:
    r = evaluate(task, source, cfg, keep_rounds=True)
    t = r.timing
    return {"success": r.success, "speedup": r.speedup, "score_raw": t.get("score_raw") if r.success else None,
            "estimate": t.get("estimate"), "ci": [t.get("ci_low"), t.get("ci_high")], "flags": r.flags,
            "wall_s": r.wall_s, "timing_s": t.get("timing_s"), "rounds": t.get("rounds"), "stop": t.get("stop"),
            "k": t.get("calls_per_round"), "ref_ms": t.get("ref_median_ms"), "cand_ms": t.get("cand_median_ms"),
            "charge_ms": t.get("harness_charge_ms"), "ref_slowdown": t.get("ref_slowdown"),
            "overhead_ms": t.get("overhead_ms"), "phases_s": t.get("phases_s"), "spares": t.get("spare_workers_used"),
            "quiesce_ms_max": t.get("quiesce_wait_ms_max"), "rounds_raw": t.get("rounds_raw"),
            "median_ratio": t.get("median_ratio"), "correctness_split_s": t.get("correctness_split_s"),
            "host_probe": t.get("host_probe"), "warmup_blocks": t.get("warmup_blocks"),
            "clock": t.get("clock", "host"), "graphs": t.get("graphs"),
            "span_overhead_ms": t.get("span_overhead_ms"), "settle_from_rounds": t.get("settle_from_rounds"),
            "held": {key: t.get(key) for key in ("hold_ms", "held_work_ms_ref", "held_work_ms_cand", "outside_ms_ref",
                                                 "outside_ms_cand", "host_cpu_ms_ref", "host_cpu_ms_cand",
                                                 "stretch_charge_ms", "outside_charge_ms", "host_charge_ms",
                                                 "harness_charges_ms", "harness_held_ms", "ref_harness_ms",
                                                 "cand_harness_ms")} if t.get("clock") == "held" else None,
            "error": (r.error or "")[:300] or None}


def bench_task(task: Task, seed, cfg: EvalConfig, repeats: int, long_factor: float) -> dict:
    row = {"task": task.key, "level": task.level, "seed": seed.name, "seed_device": seed.device, "repeats": []}
    try:
        for _ in range(repeats):
            row["repeats"].append(one(task, seed.source, cfg))
        ok = [x for x in row["repeats"] if x["success"]]
        if long_factor > 0 and ok:
            t_short = statistics.median(x["timing_s"] or cfg.budget_s for x in ok)
            # The reference value: 10x the timing, no early stop; 3 correctness trials (the repeats checked 20 each).
            long_cfg = dataclasses.replace(cfg, budget_s=max(long_factor * t_short, 1.0), target_ci=0.0,
                                           correctness_trials=min(cfg.correctness_trials, 3),
                                           max_wall_s=max(cfg.max_wall_s, 60 + 2 * long_factor * t_short))
            row["long"] = one(task, seed.source, long_cfg)
    except Exception:  # noqa: BLE001 - a failing task never aborts the benchmark
        row["error"] = traceback.format_exc()[-800:]
    return row


def task_metrics(row: dict) -> dict:
    reps = row.get("repeats") or []
    raw = [x["score_raw"] for x in reps]
    m: dict = {"n": len(reps)}
    if reps and all(x is not None and x > 0 for x in raw):
        m["repeat_dev"] = max(raw) / min(raw) - 1
        m["score_median"] = statistics.median(raw)
    long = row.get("long") or {}
    if long.get("success") and long.get("estimate") and "score_median" in m:
        m["agree_dev"] = abs(m["score_median"] / long["estimate"] - 1)
        m["over_claim"] = max(x / long["estimate"] - 1 for x in raw)
    m["capped"] = sum(1 for x in reps if not x["success"] or "unstable-timing" in x["flags"]
                      or set(x["flags"]) & (CAPPED | FATAL))
    return m


def load_rows(out_dir: Path) -> list[dict]:
    """A folder's rows, the later row of a task winning (a rerun of a slice); none if it has no rows yet."""
    plain, packed = out_dir / "rows.jsonl", out_dir / "rows.jsonl.gz"  # committed results are stored gzipped
    if plain.exists():
        text = plain.read_text()
    elif packed.exists():
        import gzip

        text = gzip.decompress(packed.read_bytes()).decode()
    else:
        return []
    latest = {}
    for line in text.splitlines():
        if line.strip():
            r = json.loads(line)
            latest[r["task"]] = r
    return list(latest.values())


def compare(old_dir: Path, new_dir: Path) -> str:
    """Per task, two benchmark folders (two evaluator versions, or two machines): median score and repeat spread of
    each, the change, and whether it lies within the two runs' own repeatability (the larger max/min - 1 of the
    two, or 2%, whichever is larger). Markdown, for a results README."""
    old = {r["task"]: task_metrics(r) for r in load_rows(old_dir)}
    new = {r["task"]: task_metrics(r) for r in load_rows(new_dir)}
    lines = ["| task | old score | old dev | new score | new dev | change | within own repeatability |",
             "|---|---:|---:|---:|---:|---:|---|"]
    both = [k for k in sorted(old) if k in new and "score_median" in old[k] and "score_median" in new[k]]
    within = 0
    for k in both:
        o, n = old[k], new[k]
        change = n["score_median"] / o["score_median"] - 1
        ok = abs(change) <= max(o["repeat_dev"], n["repeat_dev"], 0.02)
        within += ok
        lines.append(f"| {k} | {o['score_median']:.3f} | {o['repeat_dev']:.3f} | {n['score_median']:.3f} | "
                     f"{n['repeat_dev']:.3f} | {change:+.1%} | {'yes' if ok else '**no**'} |")
    only_old = sorted(k for k in old if k not in both)
    only_new = sorted(k for k in new if k not in both)
    lines += ["", f"{within} of {len(both)} tasks that both ran are within their own repeatability; "
              f"not compared (no row, or a repeat failed) in old: {only_old}; in new: {only_new}"]
    return "\n".join(lines) + "\n"


def summarize(out_dir: Path) -> dict:
    rows = load_rows(out_dir)
    ms = [(r, task_metrics(r)) for r in rows]
    rep = [m["repeat_dev"] for _, m in ms if "repeat_dev" in m]
    agr = [m["agree_dev"] for _, m in ms if "agree_dev" in m]
    over = [m["over_claim"] for _, m in ms if "over_claim" in m]
    n_reps = sum(m["n"] for _, m in ms)
    warm = [x for r in rows for x in (r.get("repeats") or [])[1:]]
    warm12 = [x["wall_s"] for r in rows if r["level"] in (1, 2) for x in (r.get("repeats") or [])[1:]]
    summary = {
        "tasks": len(rows), "tasks_with_all_repeats_successful": len(rep), "evaluations": n_reps,
        "repeatability_within_2pct": round(sum(d <= 0.02 for d in rep) / len(rep), 3) if rep else None,
        "repeatability_worst": round(max(rep), 4) if rep else None,
        "agreement_within_3pct": round(sum(d <= 0.03 for d in agr) / len(agr), 3) if agr else None,
        "agreement_worst": round(max(agr), 4) if agr else None,
        "over_claim_worst": round(max(over), 4) if over else None,
        "honest_capped_share": round(sum(m["capped"] for _, m in ms) / n_reps, 3) if n_reps else None,
        "median_eval_wall_s": round(statistics.median(warm12), 2) if warm12 else None,
        "max_eval_wall_s": round(max(x["wall_s"] for r in rows for x in r.get("repeats") or []), 2) if n_reps else None,
        "max_long_run_wall_s": round(max((r["long"].get("wall_s") or 0.0 for r in rows if r.get("long")),
                                         default=0.0), 2),
        "evals_per_gpu_hour": round(3600 / statistics.mean(x["wall_s"] for x in warm)) if warm else None,
    }
    meta = json.loads((out_dir / "meta.json").read_text()) if (out_dir / "meta.json").exists() else {}
    summary = {**meta, "summary": summary}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    md = [f"# Evaluator benchmark ({meta.get('date', '?')}, {meta.get('gpu', '?')}, {EVALUATOR_VERSION})", "",
          "score: median of the repeats' reported scores (the interval's lower bound, unrounded); interval: of "
          "the first repeat; dev: max/min-1 of the repeats; long: the long run's estimate; agree: |score/long-1|; "
          "ms: per call (candidate incl. any harness charge); wall: median s per evaluation.", "",
          "| task | seed | score | interval | dev | long | agree | ref ms | cand ms | k | rounds | wall s | flags |",
          "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r, m in ms:
        reps = r.get("repeats") or [{}]
        f0 = reps[0]
        flags = sorted({f for x in reps for f in x.get("flags", [])})
        fmt = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        md.append(f"| {r['task']} | {r['seed']} | {fmt(m.get('score_median'))} | "
                  f"[{fmt((f0.get('ci') or [None])[0])}, {fmt((f0.get('ci') or [None, None])[1])}] | "
                  f"{fmt(m.get('repeat_dev'), 4)} | {fmt((r.get('long') or {}).get('estimate'))} | "
                  f"{fmt(m.get('agree_dev'), 4)} | {fmt(f0.get('ref_ms'), 4)} | {fmt(f0.get('cand_ms'), 4)} | "
                  f"{f0.get('k', '-')} | {f0.get('rounds', '-')} | "
                  f"{fmt(statistics.median(x['wall_s'] for x in reps) if reps and 'wall_s' in f0 else None, 1)} | "
                  f"{', '.join(flags) or '-'}{' ERROR' if r.get('error') else ''} |")
    md += ["", "```", json.dumps(summary["summary"], indent=1), "```"]
    (out_dir / "table.md").write_text("\n".join(md) + "\n")
    return summary


def apply_sets(cfg: EvalConfig, sets: list[str]) -> EvalConfig:
    """``--set KEY=VALUE`` (repeatable): any EvalConfig knob, so an experiment needs no new flag. The value is read
    as YAML like every ``--set`` of the project (``kernelrl.step.parse_sets``: ``true``, ``0``, ``12.5``) and
    checked against the knob's type and bounds (``recipes.with_overrides``); a bad one exits with its name."""
    try:
        return with_overrides(cfg, parse_sets(sets), "--set")
    except ConfigError as e:
        raise SystemExit(str(e)) from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out-dir", type=Path, default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="Any public EvalConfig knob (repeatable), e.g. --set target_ci=0.")
    ap.add_argument("--summarize", type=Path, default=None, help="Only write summary.json/table.md of a folder.")
    ap.add_argument("--compare", type=Path, nargs=2, default=None, metavar=("OLD", "NEW"),
                    help="Only print a per-task comparison of two folders' rows (Markdown).")
    ap.add_argument("--resume", action="store_true", help="Skip the tasks that already have a row in --out-dir "
                    "(a run split over device calls, each cut short by its time limit, goes on where it stopped).")
    ap.add_argument("--only", default="", help="A slice i:j of the candidate list (split a run over calls), or a "
                    "comma list of indices.")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=None, help="Timing cap per evaluation (default: EvalConfig).")
    ap.add_argument("--correctness-trials", type=int, default=None)
    ap.add_argument("--clock", default=None, choices=("host", "device", "held"),
                    help="EvalConfig.clock (default: its own).")
    ap.add_argument("--long-factor", type=float, default=10.0)
    ap.add_argument("--max-wall-s", type=float, default=None, help="EvalConfig.max_wall_s: the cap on one "
                    "evaluation (the issue's max_eval_wall_s target is 60; the default 300 let the scaled GRU's "
                    "5 evaluations + long run outlast a 10-minute device call)")
    ap.add_argument("--cuda-graphs", action="store_true", help="EvalConfig.cuda_graphs = True: held spans are "
                    "CUDA-graph replays on both sides where both capture (the default since version 9; the flag "
                    "keeps the v9 benchmark's commands valid).")
    ap.add_argument("--max-minutes", type=float, default=9.0)
    ap.add_argument("--prebuild-only", action="store_true", help="Only build the extensions (e.g. on other cores "
                    "while something else is timed), then exit.")
    ap.add_argument("--no-prebuild", action="store_true", help="CUDA: skip building the candidates' extensions "
                    "ahead (in parallel); the first repeat of each then includes its nvcc build.")
    a = ap.parse_args()
    if a.summarize:
        print(json.dumps(summarize(a.summarize)["summary"], indent=1))
        return
    if a.compare:
        print(compare(*a.compare), end="")
        return
    if a.out_dir is None:
        ap.error("--out-dir is required")
    a.out_dir.mkdir(parents=True, exist_ok=True)
    cfg = EvalConfig(device=a.device, reverify=False)
    if a.budget_s is not None:
        cfg = dataclasses.replace(cfg, budget_s=a.budget_s)
    if a.correctness_trials is not None:
        cfg = dataclasses.replace(cfg, correctness_trials=a.correctness_trials)
    if a.clock is not None:
        cfg = dataclasses.replace(cfg, clock=a.clock)
    if a.max_wall_s is not None:
        cfg = dataclasses.replace(cfg, max_wall_s=a.max_wall_s)
    if a.cuda_graphs:
        cfg = dataclasses.replace(cfg, cuda_graphs=True)
    cfg = apply_sets(cfg, a.set)
    import torch

    meta = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "host": platform.node(),
            "device": a.device, "torch": torch.__version__, "evaluator": EVALUATOR_VERSION,
            "gpu": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu",
            "settings": {k: v for k, v in dataclasses.asdict(cfg).items()
                         if k in ("budget_s", "target_ci", "min_rounds", "correctness_trials", "spread_threshold",
                                  "clock", "max_wall_s", "cuda_graphs")},
            "set": a.set,
            "repeats": a.repeats, "long_factor": a.long_factor}
    if (a.out_dir / "prebuild.json").exists():  # built ahead by a --prebuild-only run
        meta["prebuild"] = json.loads((a.out_dir / "prebuild.json").read_text())
    if not a.prebuild_only:
        (a.out_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    cands = candidates(a.device)
    if ":" in a.only:
        i, j = (int(x) if x else None for x in a.only.split(":"))
        cands = cands[i:j]
    elif a.only:
        cands = [cands[int(x)] for x in a.only.split(",")]
    if a.resume:
        done = {r["task"] for r in load_rows(a.out_dir)}
        print(json.dumps({"resume_skips": sorted(t.key for t, _ in cands if t.key in done)}), flush=True)
        cands = [(t, s) for t, s in cands if t.key not in done]
    t_stop = time.monotonic() + a.max_minutes * 60
    if a.device.startswith("cuda") and not a.no_prebuild:
        meta["prebuild"] = prebuild(cands, cfg, a.device)
        (a.out_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(json.dumps({"prebuild": meta["prebuild"]}), flush=True)
        if a.prebuild_only:
            (a.out_dir / "prebuild.json").write_text(json.dumps(meta["prebuild"], indent=1) + "\n")
            return
    for task, seed in cands:
        if time.monotonic() > t_stop:
            print(json.dumps({"stopped_early_before": task.key}), flush=True)
            break
        row = bench_task(task, seed, cfg, a.repeats, a.long_factor)
        with open(a.out_dir / "rows.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        m = task_metrics(row)
        print(json.dumps({"task": task.key, "seed": seed.name, "scores": [x["score_raw"] for x in row["repeats"]],
                          "long": (row.get("long") or {}).get("estimate"),
                          "walls": [x["wall_s"] for x in row["repeats"]], "stops": [x["stop"] for x in row["repeats"]],
                          "flags": sorted({f for x in row["repeats"] for f in x["flags"]}),
                          **{k: round(v, 4) for k, v in m.items() if isinstance(v, float)},
                          "error": row.get("error") or next((x["error"] for x in row["repeats"] if x["error"]), None)}),
              flush=True)
    print(json.dumps(summarize(a.out_dir)["summary"], indent=1))


if __name__ == "__main__":
    main()
