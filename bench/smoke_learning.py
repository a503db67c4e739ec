"""Does crl improve on selfsup, by more than seed-to-seed noise? The smoke recipe, 3 seeds, a stated effect size.

    .venv/bin/python bench/smoke_learning.py                                  # 3 seeds, fresh homes, ~35-60 min
    .venv/bin/python bench/smoke_learning.py --seeds 0,1,2 --k 8 --out bench/results
    .venv/bin/python bench/smoke_learning.py --render bench/results/smoke-learning-DATE.json   # Markdown again

For each seed: a fresh KERNELRL_HOME (SQLite, local checkpoints), augment -> sft -> selfsup -> crl of the smoke
recipe as separate processes (``python -m steps.<stage>``, every seed knob set to the seed), then the selfsup
and crl final checkpoints sampled **alike**: k samples per task, the same fixed sampling seed, temperature and
token budget, on the *same* prompts: crl's own format (contrastive; exemplars from the run's own pool as it
stood when selfsup ended, so neither policy sees crl's kernels in its prompt) and the augmentation prompt.

The score of a policy on a task is the mean over its k samples of speedup / M, where M is the best speedup any
successful sample of either policy reached on that task in that seed (unsuccessful samples score 0). Each task
thus weighs the same, in [0, 1]: one memorised 95x kernel cannot carry the result (the earlier version of this
check rested on exactly that). The effect of a seed is D = mean over tasks of (crl score - selfsup score).

Claims (contrastive prompt; the augmentation prompt is reported beside it, not claimed):

- ``interval_excludes_zero``: the 95% t-interval of the mean of D over the seeds lies above 0;
- ``effect_at_least_2x_seed_noise``: mean D > 0 and >= 2 x the seed-to-seed SD of the selfsup score;
- ``holds_without_any_single_task``: mean D stays > 0 with any one task left out.

The script exits 1 when a claim fails: the check can fail, and a failure is a result. What it shows, plainly: a
0.7M-parameter random-init model memorises the seed corpus; a pass means the RL signal shifts it toward the
faster memorised kernels reproducibly, not that it learns to write kernels.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MARKER = "KERNELRL_MANIFEST "
STAGES = ("augment", "sft", "selfsup", "crl")
POLICIES = ("selfsup", "crl")
FORMATS = ("contrastive", "augment")
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


# -- statistics (pure; tests/test_bench_scripts.py checks them on made-up data) -------------------------------------
def t_interval(xs: list[float]) -> list[float]:
    """[mean, low, high]: the mean with its 95% t-interval (infinitely wide for one value)."""
    n = len(xs)
    m = sum(xs) / n if n else float("nan")
    half = T975.get(n - 1, 1.96) * statistics.stdev(xs) / math.sqrt(n) if n > 1 else float("inf")
    return [m, m - half, m + half]


def task_scores(per_task: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """{task: {policy: [speedups, 0 = unsuccessful]}} -> {task: {policy: mean of speedup / task max}}."""
    out = {}
    for task, by_policy in per_task.items():
        best = max((s for sp in by_policy.values() for s in sp), default=0.0)
        out[task] = {p: (sum(s / best for s in sp) / len(sp) if best > 0 and sp else 0.0)
                     for p, sp in by_policy.items()}
    return out


def seed_effect(scores: dict[str, dict[str, float]], drop: str | None = None) -> float:
    tasks = [t for t in scores if t != drop]
    return sum(scores[t]["crl"] - scores[t]["selfsup"] for t in tasks) / len(tasks) if tasks else 0.0


def learning_stats(seeds: dict[str, dict[str, dict[str, list[float]]]]) -> dict:
    """Per-seed effects D, their mean with a 95% t-interval, the selfsup score's seed-to-seed SD, the
    leave-one-task-out minimum, and the three claims."""
    scores = {s: task_scores(pt) for s, pt in seeds.items()}
    effects = {s: seed_effect(sc) for s, sc in scores.items()}
    base = {s: sum(v["selfsup"] for v in sc.values()) / len(sc) for s, sc in scores.items()}
    n = len(effects)
    mean, lo, hi = t_interval(list(effects.values()))
    sd = statistics.stdev(effects.values()) if n > 1 else float("inf")
    noise = statistics.stdev(base.values()) if n > 1 else float("inf")
    tasks = sorted({t for sc in scores.values() for t in sc})
    loo = {t: sum(seed_effect(sc, drop=t) for sc in scores.values()) / n for t in tasks}
    claims = {"interval_excludes_zero": lo > 0,
              "effect_at_least_2x_seed_noise": mean > 0 and mean >= 2 * noise,
              "holds_without_any_single_task": min(loo.values(), default=0.0) > 0}
    return {"scores": scores, "effects": effects, "mean_effect": mean, "sd_effect": sd, "ci95": [lo, hi],
            "selfsup_score": base, "seed_noise_sd": noise,
            "effect_over_noise": mean / noise if noise and math.isfinite(noise) else None,
            "leave_one_task_out": loo, "claims": claims}


# -- running ----------------------------------------------------------------------------------------------------
def run_stage(stage: str, run: str, seed: int, args, env: dict, home: Path) -> tuple[dict, dict]:
    sets = [f"seed={seed}", f"sft.seed={seed}", f"selfsup.sft.seed={seed}", f"crl.seed={seed}", *args.set]
    cmd = [sys.executable, "-m", f"steps.{stage}", "--recipe", args.recipe, "--run", run,
           *[a for s in sets for a in ("--set", s)]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(home / f"{stage}.log", "w") as fh:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=fh, text=True, env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"seed {seed} {stage} failed (rc {r.returncode}); see {home / (stage + '.log')}\n{r.stdout[-2000:]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith(MARKER)][-1]
    print(f"seed {seed} {stage}: {wall:.0f} s wall", flush=True)
    return json.loads(line[len(MARKER):]), {"wall_s": round(wall, 1), "cpu_s": round(
        (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1)}


def sample_policies(manifests: dict, run: str, seed: int, snapshot: int, args) -> dict:
    """Both final checkpoints, k samples per task, same seed and prompts, in both formats."""
    from kernelrl.config.recipes import load_recipe
    from kernelrl.config.settings import load_settings
    from kernelrl.evaluation.service import EvalService
    from kernelrl.step import parse_sets
    from kernelrl.store import Store
    from kernelrl.training.common import load_policy, policy_eval, recipe_tasks
    from kernelrl.training.policy import device_scope, pool_scope, prompt_fn_for

    settings = load_settings()
    recipe = load_recipe(args.recipe, parse_sets([f"seed={seed}", *args.set]))
    store = Store(settings.resolved_store_url)
    tasks = recipe_tasks(recipe, settings)
    cfg = recipe.crl
    out: dict = {}
    with EvalService(store, recipe.eval, local_workers=1) as svc:
        dtype, kind = device_scope(recipe.eval, svc)
        scope = pool_scope(recipe, run, device_type=dtype, device_kind=kind)
        prompts = {}
        for policy in POLICIES:
            model_dir = manifests[policy]["outputs"]["model_dir"]
            backend = load_policy(model_dir, device="cpu")
            for fmt in FORMATS:
                if fmt not in prompts:  # built once (same tokenizer): both policies see identical prompts
                    prompts[fmt] = prompt_fn_for(fmt, tasks, store, recipe, scope, backend.count_tokens,
                                                 seed=args.sample_seed, as_of=snapshot)
                fn, prov = prompts[fmt]
                m = policy_eval(model_dir, tasks, store, svc, k=args.k, max_tokens=cfg.eval_max_new_tokens,
                                temperature=cfg.eval_temperature, stage=f"learn-{policy}", run=run,
                                seed=args.sample_seed, prompt_fn=fn, prompt_format=fmt, backend=backend)
                m["provenance"] = {k: v for k, v in prov.items() if k != "exemplar_ids"}
                out.setdefault(fmt, {})[policy] = m
            backend.close()
    store.engine.dispose()
    return out


def one_seed(seed: int, args, base_env: dict) -> dict:
    home = Path(args.home) / f"seed-{seed}"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(base_env, KERNELRL_HOME=str(home))
    os.environ.update(env)
    from kernelrl.config.settings import get_settings

    get_settings.cache_clear()
    run = f"learn-s{seed}"
    manifests, timings, snapshot = {}, {}, 0
    for stage in STAGES:
        manifests[stage], timings[stage] = run_stage(stage, run, seed, args, env, home)
        if stage == "selfsup":  # the pool both policies' contrastive prompts draw from: before crl's kernels
            from kernelrl.config.settings import load_settings
            from kernelrl.store import Store
            from kernelrl.training.crl import store_snapshot

            st = Store(load_settings().resolved_store_url)
            snapshot = store_snapshot(st)
            st.engine.dispose()
    t0 = time.monotonic()
    sampled = sample_policies(manifests, run, seed, snapshot, args)
    tr = manifests["crl"]["metrics"].get("training") or {}
    return {"seed": seed, "run": run, "home": str(home), "timings": timings, "sampling_wall_s":
            round(time.monotonic() - t0, 1), "snapshot": snapshot, "sampled": sampled,
            "crl_training": {k: tr.get(k) for k in ("steps", "reward_mean_per_step", "success_rate_per_step",
                                                     "pool", "prompt", "sampler")}}


def analyse(seeds: list[dict]) -> dict:
    out = {}
    for fmt in FORMATS:
        data = {str(s["seed"]): {t: {p: s["sampled"][fmt][p]["per_task"][t]["speedups"] for p in POLICIES}
                                 for t in s["sampled"][fmt]["crl"]["per_task"]} for s in seeds}
        out[fmt] = learning_stats(data)
        out[fmt]["raw"] = {str(s["seed"]): {p: {k: s["sampled"][fmt][p][k] for k in
                                                ("success_rate", "mean_speedup", "speedup_p50", "max_speedup")}
                                            for p in POLICIES} for s in seeds}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", default=None, help="Parent of the per-seed KERNELRL_HOMEs (default: a fresh temp dir).")
    ap.add_argument("--seeds", default="0,1,2", help="Comma-separated seeds (every seed knob of the recipe).")
    ap.add_argument("--k", type=int, default=8, help="Samples per task and policy (and prompt format).")
    ap.add_argument("--sample-seed", type=int, default=2468, help="Sampling seed, the same for both policies.")
    ap.add_argument("--recipe", default="smoke", help="Recipe (default smoke).")
    ap.add_argument("--set", action="append", default=[], help="Recipe override passed to every step.")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="Where to write the results.")
    args = ap.parse_args()
    args.home = args.home or tempfile.mkdtemp(prefix="kernelrl-learning-")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT),
               KERNELRL_LOG_LEVEL=os.environ.get("KERNELRL_LOG_LEVEL", "WARNING"))
    for var in ("KERNELRL_STORE_URL", "KERNELRL_CHECKPOINT_URI"):
        env.pop(var, None)
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    seeds = [one_seed(int(s), args, env) for s in args.seeds.split(",") if s.strip()]
    result = {"date": started.isoformat(timespec="seconds"), "host": platform.node(),
              "python": platform.python_version(), "device": "cpu", "cpu_count": os.cpu_count(),
              "recipe": args.recipe, "overrides": args.set, "k": args.k, "sample_seed": args.sample_seed,
              "command": " ".join([sys.executable, *sys.argv]), "wall_s": round(time.monotonic() - t0, 1),
              "seeds": seeds, "analysis": analyse(seeds)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"smoke-learning-{started.date().isoformat()}"
    Path(f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
    Path(f"{stem}.md").write_text(render_md(result))
    claims = result["analysis"]["contrastive"]["claims"]
    print(json.dumps(claims))
    print(f"wrote {stem}.md and .json")
    return 0 if all(claims.values()) else 1


# -- Markdown ---------------------------------------------------------------------------------------------------
def _f(x, d=3) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{d}f}"


def render_md(r: dict) -> str:
    a = r["analysis"]
    c = a["contrastive"]
    seeds = [str(s["seed"]) for s in r["seeds"]]
    L = [f"# Smoke learning check: crl vs selfsup over {len(seeds)} seeds ({r['date'][:10]})", "",
         "**What this is, plainly:** the tiny 0.7M-parameter random-init model of the smoke recipe, trained on CPU, "
         "*memorises* the seed corpus that stands in for teacher LLMs; it learns no general skill. The question "
         "here is narrower: does GRPO with the speedup reward move the memorised policy toward the faster of its "
         "memorised kernels, by more than the difference between seeds?", "",
         f"- Command: `{r['command']}`",
         f"- CPU only ({r['cpu_count']} cores shared with other developers' test runs), host {r['host']}, Python "
         f"{r['python']}; recipe `{r['recipe']}` {' '.join(r['overrides'])}; wall {r['wall_s'] / 60:.0f} min",
         f"- Per seed: a fresh home, augment -> sft -> selfsup -> crl with every seed knob = the seed; then both "
         f"final checkpoints sampled alike: k = {r['k']} per task, sampling seed {r['sample_seed']}, the crl "
         "section's eval temperature and token budget, identical prompts (contrastive: exemplars from the run's own "
         "pool as it stood when selfsup ended).",
         "- Score of a policy on a task: mean over its samples of speedup / (best speedup of any successful sample "
         "of either policy on that task and seed); unsuccessful = 0. Each task weighs the same (in [0, 1]).",
         "- Effect of a seed: D = mean over tasks of (crl score - selfsup score). Stated effect: the 95% t-interval "
         "of mean D excludes 0, mean D >= 2 x the seed-to-seed SD of the selfsup score, and mean D > 0 with any one "
         "task left out.", "", "## Claims (contrastive prompt: the format crl trained on)", ""]
    L += [f"- {'PASS' if ok else 'FAIL'}: {k}" for k, ok in c["claims"].items()]
    for fmt in FORMATS:
        s = a[fmt]
        L += ["", f"## {fmt} prompt", "",
              f"mean D = {_f(s['mean_effect'])}, 95% interval [{_f(s['ci95'][0])}, {_f(s['ci95'][1])}], SD of D "
              f"{_f(s['sd_effect'])}; seed-to-seed SD of the selfsup score {_f(s['seed_noise_sd'])} (mean D / that "
              f"= {_f(s['effect_over_noise'], 2)}); leave-one-task-out mean D: "
              + ", ".join(f"{t.split('/')[-1]} {_f(v)}" for t, v in s["leave_one_task_out"].items()), "",
              "| seed | D | selfsup score | selfsup success / mean speedup | crl success / mean speedup |",
              "|---|---:|---:|---|---|"]
        for sd in seeds:
            raw = s["raw"][sd]
            L.append(f"| {sd} | {_f(s['effects'][sd])} | {_f(s['selfsup_score'][sd])} | "
                     f"{raw['selfsup']['success_rate']:.2f} / {raw['selfsup']['mean_speedup']:.2f} | "
                     f"{raw['crl']['success_rate']:.2f} / {raw['crl']['mean_speedup']:.2f} |")
        L += ["", "| task | " + " | ".join(f"seed {sd} selfsup -> crl" for sd in seeds) + " |",
              "|---|" + "---|" * len(seeds)]
        for t in sorted(next(iter(s["scores"].values()))):
            L.append(f"| {t} | " + " | ".join(f"{_f(s['scores'][sd][t]['selfsup'], 2)} -> "
                                              f"{_f(s['scores'][sd][t]['crl'], 2)}" for sd in seeds) + " |")
    L += ["", "## Runs", ""]
    for sd in r["seeds"]:
        tm = ", ".join(f"{k} {v['wall_s']:.0f} s" for k, v in sd["timings"].items())
        tr = sd["crl_training"]
        L.append(f"- seed {sd['seed']}: {tm}; sampling {sd['sampling_wall_s']:.0f} s; crl pool: {tr.get('pool')}; "
                 f"reward mean per step {tr.get('reward_mean_per_step')}")
    L += ["", "Speedups are CPU measurements (the smoke recipe's 0.5 s of paired timing); within a seed, a kernel "
          "both policies write is measured once (the store's cache), across seeds each home measures it anew, so "
          "timing noise is part of the seed-to-seed noise.", ""]
    return "\n".join(L)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--render":
        p = Path(sys.argv[2])
        p.with_suffix(".md").write_text(render_md(json.loads(p.read_text())))
        sys.exit(0)
    sys.exit(main())
