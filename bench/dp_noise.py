"""Is two-process data-parallel sft the same as one process, within seed-to-seed noise? (issue 30 item 4)

    .venv/bin/python bench/dp_noise.py store --home .dpnoise --seeds 1,2,3          # here, on CPU: the store
    python3 bench/dp_noise.py run --home /tmp/dph --seeds 1,2,3 --out $OUT/dp        # on a 2-GPU host
    .venv/bin/python bench/dp_noise.py analyse --out bench/results/<dir>/dp          # curves, spread, verdict

Why a store built here: the pipeline's sft trains on what augment found, and augment needs the GPU evaluators (two
minutes of device time). The question here is only whether 1 and 2 processes train alike on the SAME data, so the
data is fixed on CPU: for each task of recipes/gpu-smoke.yaml, the seed-corpus teacher's answers in its trial order
(``kernelrl.training.augment.seed_answers``), the first ``augment.target_successes`` that the corpus marks faster or
slower taken as the successes (on the H100/H200 runs g1 and g2, augment kept exactly those), stored as evaluations
of device type cpu (so the contrastive copies draw the same exemplars with ``eval.device=cpu``). One run per
(processes, seed), each with the same candidates, so every sft starts fresh.

``run`` trains each run with ``python -m steps.sft`` (1 process, CUDA_VISIBLE_DEVICES=0, batch 4) or ``accelerate
launch --num_processes 2`` (the flow's own DDP arguments, flows/gpu_launch.py; GPUs 0,1; sft.batch_size 4 is the
step's batch, 2 per process since the fix after the H100 x4 run: sft.data_parallel_rows), ``sft.seed`` = the
seed, no policy evaluation (``sft.eval_samples_per_task=0``); it keeps
each run's loss curve (JSON per run; the logs in logs.tgz). ``analyse`` compares the curves: at every logged
step, the 2-process mean against the 1-process mean +- the larger of the two seed spreads (min-max),
and the final losses.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RECIPE = "gpu-smoke"
SPEEDUP = {"faster": 2.0, "slower": 0.8}  # what the prompts' exemplars show; the values do not enter the sft loss


def runs(seeds: list[int]) -> list[tuple[str, int, int]]:
    return [(f"dp{n}-s{s}", n, s) for s in seeds for n in (1, 2)]


def build_store(home: Path, seeds: list[int]) -> dict:
    os.environ["KERNELRL_HOME"] = str(home)
    from kernelrl.config.recipes import load_recipe
    from kernelrl.config.settings import load_settings
    from kernelrl.store import Store
    from kernelrl.tasks import load_seeds
    from kernelrl.training.augment import SEED_ORDER, strip_seed_header
    from kernelrl.training.common import recipe_tasks

    settings = load_settings()
    recipe = load_recipe(RECIPE)
    st = Store(settings.resolved_store_url)
    st.upgrade()
    picked = {}
    for task in recipe_tasks(recipe, settings):
        seeds_t = sorted(load_seeds(task), key=lambda s: (SEED_ORDER.get(s.expect, 9), s.name))
        ok = [s for s in seeds_t if s.expect in SPEEDUP][:recipe.augment.target_successes]
        tid = st.upsert_task(task)
        for s in ok:
            src = strip_seed_header(s.source)
            cid = st.add_candidate(tid, src, origin_stage="augment", run_name=None)
            st.add_evaluation(cid, {"executable": True, "correct": True, "speedup": SPEEDUP[s.expect],
                                    "flags": [], "device_type": "cpu", "evaluator_version": "dp-noise"})
            for run, _, _ in runs(seeds):
                st.add_attempt(tid, stage="augment", run_name=run, candidate_id=cid, response=f"```python\n{src}```",
                               dedup_key=f"{run}:augment:{s.name}")
            picked.setdefault(task.key, []).append(s.name)
    for run, _, _ in runs(seeds):
        st.ensure_run(run, RECIPE)
        st.set_stage(run, "augment", status="done", recipe=RECIPE, manifest={"outputs": {}, "metrics": {}})
    st.engine.dispose()
    return picked


def run_all(home: Path, seeds: list[int], out: Path, timeout_s: float, gpus: str = "0,1") -> None:
    from flows.gpu_launch import DDP_DEFAULTS, free_port

    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"  # packed into logs.tgz at the end: the device returns at most 8 files
    logs.mkdir(exist_ok=True)
    for run, n, seed in runs(seeds):
        sets = [f"sft.seed={seed}", "eval.device=cpu", "sft.eval_samples_per_task=0", "sft.batch_size=4",
                "gpus.train=[]", "gpus.evaluate=[]"]
        step = ["-m", "steps.sft", "--recipe", RECIPE, "--run", run, *[a for s in sets for a in ("--set", s)]]
        if n == 1:
            cmd, visible = [sys.executable, *step], gpus.split(",")[0]
        else:
            cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--main_process_port",
                   str(free_port()), *DDP_DEFAULTS, *step]
            visible = gpus
        env = dict(os.environ, KERNELRL_HOME=str(home), CUDA_VISIBLE_DEVICES=visible, KERNELRL_EVAL_LOCAL_WORKERS="0",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.monotonic()
        with open(logs / f"{run}.log", "w") as fh:
            r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=timeout_s)
        wall = round(time.monotonic() - t0, 1)
        lines = [ln for ln in (logs / f"{run}.log").read_text().splitlines() if ln.startswith("KERNELRL_MANIFEST ")]
        m = json.loads(lines[-1].split(" ", 1)[1]) if lines else {}
        log = home / "runs" / run / "sft" / "train-log.json"  # the trainer's log_history (rank 0's)
        hist = json.loads(log.read_text()).get("log_history", []) if log.exists() else []
        losses = [h["loss"] for h in hist if "loss" in h]
        rec = {"run": run, "processes": n, "seed": seed, "rc": r.returncode, "wall_s": wall, "losses": losses,
               "steps": [h["step"] for h in hist if "loss" in h], "metrics": m.get("metrics") or {}}
        (out / f"{run}.json").write_text(json.dumps(rec, indent=1, default=str))
        print(f"{run}: rc {r.returncode}, {wall} s, last loss {(losses or [None])[-1]}", flush=True)
        shutil.rmtree(home / "runs" / run / "sft" / "final", ignore_errors=True)  # weights: not needed
        subprocess.run(["tar", "-C", str(logs), "-czf", str(out / "logs.tgz"), "."], check=False)
    shutil.rmtree(logs, ignore_errors=True)


def analyse(out: Path) -> dict:
    recs = [json.loads(p.read_text()) for p in sorted(out.glob("dp*-s*.json"))]
    by = {1: [r for r in recs if r["processes"] == 1 and r["losses"]],
          2: [r for r in recs if r["processes"] == 2 and r["losses"]]}
    res = {"runs": {r["run"]: {"rc": r["rc"], "wall_s": r["wall_s"], "last": (r["losses"] or [None])[-1]}
                    for r in recs}}
    if not by[1] or not by[2]:
        res["verdict"] = "incomplete: a side has no loss curve"
        return res
    n = min(len(r["losses"]) for r in by[1] + by[2])
    rows, outside = [], 0
    for i in range(n):
        a = [r["losses"][i] for r in by[1]]
        b = [r["losses"][i] for r in by[2]]
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        spread = max(max(a) - min(a), max(b) - min(b))
        out_i = abs(mb - ma) > spread
        outside += out_i
        rows.append({"i": i, "one": a, "two": b, "mean_one": ma, "mean_two": mb, "spread": spread, "outside": out_i})
    res.update(points=n, outside_spread=outside, rows=rows,
               final={"one": [r["losses"][n - 1] for r in by[1]], "two": [r["losses"][n - 1] for r in by[2]]},
               verdict=("the same within seed noise" if outside == 0 else
                        f"differs beyond seed noise at {outside} of {n} logged steps"))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("store", "run", "analyse"))
    ap.add_argument("--home", default=".dpnoise", help="KERNELRL_HOME holding the store (store, run).")
    ap.add_argument("--seeds", default="1,2,3", help="sft seeds; each is trained with 1 and with 2 processes.")
    ap.add_argument("--out", default="dp-noise", help="Where the runs' logs and loss curves go (run, analyse).")
    ap.add_argument("--timeout-s", type=float, default=240, help="Per training run.")
    ap.add_argument("--gpus", default="0,1", help="Two GPU indices (run): 1-process runs on the first, 2-process "
                    "runs on both; other indices let it share a host with a pipeline run (its policy GPU is idle "
                    "while augment runs).")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.what == "store":
        print(json.dumps(build_store(Path(args.home).resolve(), seeds), indent=1))
    elif args.what == "run":
        run_all(Path(args.home).resolve(), seeds, Path(args.out), args.timeout_s, args.gpus)
        print(json.dumps({k: v for k, v in analyse(Path(args.out)).items() if k != "rows"}, indent=1))
    else:
        r = analyse(Path(args.out))
        (Path(args.out) / "analysis.json").write_text(json.dumps(r, indent=1))
        print(json.dumps({k: v for k, v in r.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
