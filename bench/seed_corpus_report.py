"""Benchmark the built-in suite's seed corpus (plain PyTorch, CUDA and Triton seeds) with the final protocol.

Usage (on a GPU node; from the repository root):

    python bench/seed_corpus_report.py --out bench/results/2026-11-22-h100-seed-corpus \
        --device cuda --budget-s 10 --correctness-trials 100 --max-minutes 25

    # within a per-command time limit: run it again with the same --out; scored seeds are skipped (resumable)
    python bench/seed_corpus_report.py --out DIR --device cuda --max-minutes 8

Writes into --out: ``report.md`` (tables: the best seed per task, and every seed with what its header expected
against what was measured), ``report.json``, ``tasks.csv``, the PNG plots (when matplotlib is importable),
``results.jsonl`` (one line per scored seed, appended as it goes: what makes the run resumable) and
``run_info.json`` (date, command, device, torch/triton versions, protocol). The store is a SQLite file in --out
unless --store-url is given; every evaluation is stored there with purpose 'final'.

Measured on an H100 (torch 2.11, this evaluator): a plain-PyTorch seed takes 10-30 s at --budget-s 1-10, a
``load_inline`` CUDA seed 70-80 s more for its sm_90 build; the whole corpus (~115 seeds, ~16 CUDA/Triton) needs
about an hour at --budget-s 10, so run it as several resumable calls (--max-minutes below the per-call limit).

Robust and time-bounded: a seed whose evaluation raises is recorded as unsuccessful with the error and the run
goes on; after --max-minutes no new seed is started (the rest are reported as not evaluated). Seeds are scored
in rounds: first the most promising seed of every task (``expect: faster``), then the next of every task, so
a cut-off run still covers every task.

Imports: kernelrl.tasks, kernelrl.config (pydantic, pydantic-settings, pyyaml), kernelrl.store (sqlalchemy,
alembic), kernelrl.evaluation (the evaluator and its service), kernelrl.reports (matplotlib optional). No typer,
rich or prefect.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

log = logging.getLogger("kernelrl.bench.seeds")


def _versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for mod in ("torch", "triton", "sqlalchemy", "numpy", "matplotlib"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    try:
        import torch

        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
            out["cuda"] = torch.version.cuda
    except Exception:
        pass
    return out


def expectation(row: dict, expect: str) -> str:
    """'ok' when the measurement agrees with the seed header's claim, else what happened instead."""
    if expect == "wrong":
        return "ok" if not row["success"] else "MISMATCH: passed although marked wrong"
    if not row["success"]:
        return f"MISMATCH: unsuccessful ({(row.get('error') or 'incorrect').splitlines()[0][:60]})"
    if expect == "faster":
        return "ok" if row["speedup"] > 1.0 else f"slower than claimed ({row['speedup']:.2f}x)"
    return "ok" if row["speedup"] <= 1.0 else f"faster than claimed ({row['speedup']:.2f}x)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="Report directory (also holds the SQLite store).")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, cpu or auto.")
    ap.add_argument("--budget-s", type=float, default=10.0,
                    help="Timing seconds per seed (the paper's final protocol: 1200; 10 ranks seeds reliably).")
    ap.add_argument("--correctness-trials", type=int, default=100,
                    help="Random input sets per seed (paper: 1000; 100 keeps the corpus within a session).")
    ap.add_argument("--levels", default=None, help="Comma-separated levels (default: all).")
    ap.add_argument("--max-minutes", type=float, default=25.0, help="Start no new seed after this many minutes.")
    ap.add_argument("--store-url", default=None, help="Store URL (default: sqlite:///<out>/store.db).")
    ap.add_argument("--no-plots", action="store_true", help="Skip the PNG plots.")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger("kernelrl").setLevel(logging.INFO)

    from kernelrl.errors import KernelRLError
    from kernelrl.reports.report import Report
    from kernelrl.reports.runner import build_source, device_kind, load_tasks
    from kernelrl.reports.scoring import Scorer, final_config, protocol_dict
    from kernelrl.reports.sources import ResolvedSource, resolve
    from kernelrl.store import Store

    t0 = time.time()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    try:
        levels = [int(x) for x in args.levels.split(",")] if args.levels else None
        tasks = load_tasks("builtin", levels)
        cfg = final_config(None, device=args.device, budget_s=args.budget_s,
                           correctness_trials=args.correctness_trials)
        every = resolve("seeds:all", tasks, device_kind=device_kind(cfg.device), label="every seed")
        store = Store(args.store_url or f"sqlite:///{(out / 'store.db').resolve()}")
        store.upgrade()
    except KernelRLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    # resume: what an earlier call already scored
    done_path = out / "results.jsonl"
    done: dict[tuple[str, str], dict] = {}
    if done_path.exists():
        for line in done_path.read_text().splitlines():
            try:
                rec = json.loads(line)
                done[(rec["task_key"], rec["variant"])] = rec["result"]
            except (ValueError, KeyError):
                continue
    order = sorted(range(len(every.picks)), key=lambda i: (every.picks[i].rank, i))
    todo = [i for i in order if (every.picks[i].task.key, every.picks[i].variant) not in done]
    log.info("%d seeds, %d already scored, %d to score on %s", len(every.picks), len(done), len(todo), cfg.device)

    with done_path.open("a") as sink:
        def record(_n, _total, pick, res):
            sink.write(json.dumps({"task_key": pick.task.key, "variant": pick.variant, "result": res},
                                  default=str) + "\n")
            sink.flush()
            ok = res and res.get("executable") and res.get("correct")
            log.info("[%d/%d] %s/%s: %s", _n, _total, pick.task.name, pick.variant,
                     f"{float(res.get('speedup') or 0):.2f}x" if ok else (res or {}).get("error") or "unsuccessful")

        try:
            with Scorer(store, cfg, run_name="seed-corpus-report") as scorer:
                new = scorer.score([every.picks[i] for i in todo], deadline=t0 + 60 * args.max_minutes,
                                   progress=record)
        except KernelRLError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    for i, res in zip(todo, new):
        if res is not None:
            done[(every.picks[i].task.key, every.picks[i].variant)] = res
    results = [done.get((p.task.key, p.variant)) for p in every.picks]

    proto = protocol_dict(cfg)
    not_eval = "not evaluated: the --max-minutes budget was spent (run again with the same --out)"
    all_src = build_source(every, tasks, results, proto, not_evaluated=not_eval)
    expects = {(p.task.key, p.variant): p.note.split(";")[0].replace("expect ", "") for p in every.picks}
    for row in all_src.rows:
        row["expectation"] = expectation(row, expects.get((row["task_key"], row["variant"]), "faster"))
    keep = [i for i, p in enumerate(every.picks) if not p.note.startswith("expect wrong")]
    best = ResolvedSource("seed corpus (best per task)", "seeds", [every.picks[i] for i in keep],
                          notes=[n for n in every.notes if "skipped" in n] +
                          ["best correct seed per task; seeds marked 'expect: wrong' excluded"])
    best_src = build_source(best, tasks, [results[i] for i in keep], proto, not_evaluated=not_eval)
    info = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
            "protocol": proto, "versions": _versions(), "seeds": len(every.picks),
            "scored": sum(r is not None for r in results), "wall_s_this_call": round(time.time() - t0, 1)}
    (out / "run_info.json").write_text(json.dumps(info, indent=1))
    mismatches = [r for r in all_src.rows if r["evaluated"] and not r["expectation"].startswith("ok")]
    report = Report(title=f"Seed corpus of the built-in suite on {info['versions'].get('gpu') or cfg.device}",
                    sources=[best_src, all_src], suite="builtin", levels=sorted({t.level for t in tasks}),
                    command=info["command"],
                    notes=[f"protocol: {proto['budget_s']} s of paired timing and {proto['correctness_trials']} "
                           f"correctness inputs per seed on {cfg.device}; versions: "
                           + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v and k != "platform"),
                           f"{len(mismatches)} evaluated seeds disagree with their header's claim "
                           "(see 'Seed headers against measurements')"])
    paths = report.write(out, plots=not args.no_plots)
    # the expectation check, appended to the Markdown
    from kernelrl.reports.render import fmt, table

    rows = [[r["task"], r["variant"], expects.get((r["task_key"], r["variant"])), fmt(r["speedup"]) if r["success"]
             else "0", r["expectation"]] for r in sorted(all_src.rows, key=lambda r: (r["level"], r["task"]))
            if r["evaluated"]]
    with paths["markdown"].open("a") as f:
        f.write("\n## Seed headers against measurements\n\n" + table(
            ["task", "seed", "header expects", "speedup", "check"], rows, ["l", "l", "l", "r", "l"]) + "\n")
    s = best_src.summaries()["all"]
    print(json.dumps({"report": str(paths["markdown"]), "tasks": s.n, "success": s.success, "faster": s.faster,
                      "mean": round(s.mean, 3), "median": round(s.p50, 3), "scored": info["scored"],
                      "seeds": info["seeds"], "mismatches": len(mismatches)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
