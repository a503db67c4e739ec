"""Learning on the GPU, stated plainly (issue 30 item 7): one finished run's crl policy against its selfsup policy,
on identical prompts, k samples per task, several sampling seeds, scored by the GPU evaluators.

    python3 bench/gpu_learning.py --run g2 --recipe gpu-smoke --seeds 101,102,103 --k 8 --fleet 1,2,3 --out DIR
    python3 bench/gpu_learning.py --run r1 --recipe smoke --seeds 1,2 --k 2 --workers 1 --out DIR   # CPU

For each sampling seed, one ``kernelrl bench`` report (``kernelrl.reports.runner.run_bench``) of four policy sources:
``policy:RUN/selfsup`` and ``policy:RUN/crl``, each with the contrastive prompt (the format crl trained on) and the
augmentation prompt (the format selfsup trained on). Every contrastive prompt draws its exemplars from the run's pool
as it stood when crl began (``--policy-as-of crl-start``), so neither policy sees crl's own kernels and both see the
same prompt; both sample with the same seed. Every sample is final-scored (the recipe's bench protocol) by the
evaluator fleet: one ``kernelrl worker --device cuda:N`` per ``--fleet`` GPU (``flows.fleet.EvaluatorFleet``),
while the policies sample on cuda:0; ``--workers N`` scores in-process instead (CPU).

Statistics (``bench/smoke_learning.py``'s, with sampling seeds where that script has training seeds): a policy's
score on a task is the mean over its k samples of speedup / the best speedup any sample of either policy reached on
that task for that seed (unsuccessful = 0), so each task weighs the same; the effect of a seed is D = mean over tasks
of (crl - selfsup). Beside it, per policy: success rate and mean reward (speedup, 0 when unsuccessful) per seed,
their mean over seeds with a 95% t-interval, and the pooled success count with a Wilson interval. Writes
``learning.json`` and ``learning.md`` to --out (and each seed's report under ``--out/seed-S``). Exit 0 when it ran:
a claim that fails is a result, not an error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.smoke_learning import learning_stats, t_interval  # noqa: E402  (the same statistics as the CPU check)

POLICIES = ("selfsup", "crl")
FORMATS = ("contrastive", "augment")


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """The pooled success rate k/n with its 95% Wilson interval."""
    if n == 0:
        return [float("nan")] * 3
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [p, max(0.0, c - h), min(1.0, c + h)]


def per_task_speedups(report: dict, label: str) -> dict[str, list[float]]:
    """{task_key: [speedup of each sample, 0 when unsuccessful]} of one source of a report.json."""
    src = next(s for s in report["sources"] if s["label"] == label)
    out: dict[str, list[float]] = {}
    for r in src["rows"]:
        out.setdefault(r["task_key"], []).append(float(r["speedup"]) if r["success"] else 0.0)
    return out


def analyse(per_seed: dict[str, dict[str, dict[str, dict[str, list[float]]]]]) -> dict:
    """per_seed: {seed: {format: {policy: {task: [speedups]}}}} -> per format: smoke_learning's statistics of D,
    and per policy the success rate and mean reward over seeds (t-interval) and pooled (Wilson)."""
    out = {}
    for fmt in FORMATS:
        seeds = {s: {t: {p: d[fmt][p][t] for p in POLICIES} for t in d[fmt]["crl"]} for s, d in per_seed.items()}
        st = learning_stats(seeds)
        pol = {}
        for p in POLICIES:
            flat = [[x for xs in d[fmt][p].values() for x in xs] for d in per_seed.values()]  # one list per seed
            succ = [sum(x > 0 for x in f) / max(1, len(f)) for f in flat]
            rew = [sum(f) / max(1, len(f)) for f in flat]
            k, n = sum(x > 0 for f in flat for x in f), sum(map(len, flat))
            pol[p] = {"success_rate_per_seed": succ, "success_rate": t_interval(succ),
                      "success_pooled": [k, n, *wilson(k, n)], "mean_reward_per_seed": rew,
                      "mean_reward": t_interval(rew)}
        out[fmt] = dict(st, policies=pol)
    return out


def _f(x, d=3) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{d}f}"


def render_md(r: dict) -> str:
    a = r["analysis"]
    L = [f"# Learning on the GPU: crl policy vs selfsup policy of run {r['run']} ({r['date'][:10]})", "",
         "**What this is, plainly:** the policy is the locally built tiny model (random init, ~1.5M parameters). It "
         "memorises the seed corpus that stands in for teacher LLMs and cannot write kernels. The question is "
         "narrower: after crl's GRPO on GPU-measured speedups, does the policy write the faster of its memorised "
         "kernels more often than the selfsup policy it started from, on the same prompts, beyond sampling noise? "
         "No claim rests on one kernel: each task weighs the same.", "",
         f"- Command: `{r['command']}`; device {r['device']}; recipe `{r['recipe']}`; wall {r['wall_s']:.0f} s",
         f"- k = {r['k']} samples per task and policy and prompt format, {len(r['seeds'])} sampling seeds "
         f"({', '.join(map(str, r['seeds']))}), {r['n_tasks']} tasks; contrastive prompts from the pool as of "
         f"evaluation {r['as_of']} (crl's start); every sample final-scored by the evaluators ({r['scoring']}).",
         "- Speedups: the evaluator's reward clock (GPU time with launch overhead removed on both sides), not eager "
         "time.", ""]
    for fmt in FORMATS:
        s = a[fmt]
        L += [f"## {fmt} prompt" + (" (the format crl trained on)" if fmt == "contrastive" else
                                    " (the format selfsup trained on)"), "",
              "| policy | success rate, mean over seeds [95% t] | pooled successes [95% Wilson] | mean reward "
              "[95% t] |", "|---|---|---|---|"]
        for p in POLICIES:
            q = s["policies"][p]
            sr, po, mr = q["success_rate"], q["success_pooled"], q["mean_reward"]
            L.append(f"| {p} | {_f(sr[0], 2)} [{_f(sr[1], 2)}, {_f(sr[2], 2)}] | {po[0]}/{po[1]} = {_f(po[2], 2)} "
                     f"[{_f(po[3], 2)}, {_f(po[4], 2)}] | {_f(mr[0], 2)} [{_f(mr[1], 2)}, {_f(mr[2], 2)}] |")
        L += ["", f"Normalised effect (smoke_learning's D): mean {_f(s['mean_effect'])}, 95% interval "
              f"[{_f(s['ci95'][0])}, {_f(s['ci95'][1])}]; seed-to-seed SD of the selfsup score "
              f"{_f(s['seed_noise_sd'])}; leave-one-task-out mean D: "
              + ", ".join(f"{t.split('/')[-1]} {_f(v)}" for t, v in s["leave_one_task_out"].items()), ""]
        L += [f"- {'PASS' if ok else 'FAIL'}: {k}" for k, ok in s["claims"].items()]
        seeds = list(s["scores"])
        L += ["", "| task | " + " | ".join(f"seed {sd}: selfsup -> crl" for sd in seeds) + " |",
              "|---|" + "---|" * len(seeds)]
        for t in sorted(next(iter(s["scores"].values()))):
            L.append(f"| {t} | " + " | ".join(f"{_f(s['scores'][sd][t]['selfsup'], 2)} -> "
                                              f"{_f(s['scores'][sd][t]['crl'], 2)}" for sd in seeds) + " |")
        L.append("")
    return "\n".join(L)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="The finished pipeline run (its selfsup and crl stages done).")
    ap.add_argument("--recipe", default=None, help="Recipe for the protocol and sampling knobs (default: the run's).")
    ap.add_argument("--seeds", default="101,102,103", help="Sampling seeds, comma-separated (the same for both).")
    ap.add_argument("--k", type=int, default=8, help="Samples per task, policy and prompt format.")
    ap.add_argument("--fleet", default="", help="Evaluator GPUs (indices): one `kernelrl worker` each; empty: "
                    "--workers in-process workers instead.")
    ap.add_argument("--workers", type=int, default=1, help="In-process evaluation workers when --fleet is empty.")
    ap.add_argument("--max-minutes", type=float, default=None, help="Scoring bound per seed (the rest: not "
                    "evaluated, counted unsuccessful and said so in the report).")
    ap.add_argument("--out", required=True, help="Folder for learning.json, learning.md and the seeds' reports.")
    args = ap.parse_args()

    from kernelrl.config.recipes import load_recipe
    from kernelrl.config.settings import load_settings
    from kernelrl.reports.policy import pool_as_of, run_recipe
    from kernelrl.reports.runner import BenchOptions, run_bench
    from kernelrl.store import Store

    settings = load_settings()
    store = Store(settings.resolved_store_url)
    recipe = load_recipe(args.recipe) if args.recipe else run_recipe(store, args.run)
    as_of = pool_as_of("crl-start", store, args.run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    fleet = None
    if args.fleet:
        from flows.fleet import EvaluatorFleet

        fleet = EvaluatorFleet([f"cuda:{i}" for i in args.fleet.split(",")], f"{args.run}-learning",
                               Path(settings.home)).start()
    t0 = time.monotonic()
    per_seed, reports = {}, {}
    try:
        for seed in seeds:
            sources = [f"policy:{args.run}/{p}@{fmt}" for fmt in FORMATS for p in POLICIES]
            labels = [f"{p} {fmt}" for fmt in FORMATS for p in POLICIES]
            opts = BenchOptions(suite=recipe.suite, levels=list(recipe.levels), task_limit=recipe.task_limit,
                                sources=sources, labels=labels, out=out / f"seed-{seed}",
                                local_workers=0 if fleet else args.workers, chunk_size=64 if fleet else args.workers,
                                eval_base=recipe.eval, bench_base=recipe.bench, recipe=recipe, policy_k=args.k,
                                policy_seed=seed, policy_as_of=as_of, run_name=args.run, plots=False,
                                artifacts=False, max_minutes=args.max_minutes,
                                title=f"{args.run}: selfsup vs crl policy, sampling seed {seed}",
                                command=" ".join([sys.executable, *sys.argv]))
            ts = time.monotonic()
            _, paths = run_bench(opts, store)
            rep = json.loads(paths["json"].read_text())
            per_seed[str(seed)] = {fmt: {p: per_task_speedups(rep, f"{p} {fmt}") for p in POLICIES}
                                   for fmt in FORMATS}
            reports[str(seed)] = {"report": str(paths["json"]), "wall_s": round(time.monotonic() - ts, 1)}
            print(f"seed {seed}: {reports[str(seed)]['wall_s']} s", flush=True)
    finally:
        if fleet is not None:
            fleet.stop()
    import torch

    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "run": args.run,
              "recipe": recipe.name if hasattr(recipe, "name") else args.recipe, "k": args.k, "seeds": seeds,
              "as_of": as_of, "n_tasks": len(next(iter(per_seed.values()))["contrastive"]["crl"]),
              "scoring": f"fleet on cuda:{args.fleet}" if fleet else f"{args.workers} in-process workers",
              "command": " ".join([sys.executable, *sys.argv]), "wall_s": round(time.monotonic() - t0, 1),
              "reports": reports, "per_seed": per_seed, "analysis": analyse(per_seed)}
    (out / "learning.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "learning.md").write_text(render_md(result))
    print(json.dumps({f: result["analysis"][f]["claims"] for f in FORMATS}))
    print(f"wrote {out / 'learning.md'}")
    store.engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
