"""The body shared by the fake steps. Control file ``<home>/fake/<stage>.json`` keys (all optional):

    fail_times:  fail (exit 1 with a traceback, a retryable crash) on this many first attempts
    user_error:  raise a KernelRLError (exit 2: not retryable)
    sleep_s:     sleep this long inside the body (a "long" stage), printing 4 progress lines
    hang_times:  hang (sleep 120 s, to be killed) on this many first attempts
    dump_env:    write the step's environment to <home>/fake/<stage>.env.json
    no_manifest: exit 0 without writing a manifest
    noise:       print this many trl-style metric dicts (what a console must not show)
    warn:        log this warning through the step's logging (what a console must show)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from kernelrl.step import STAGES, run_step

PREV = {s: STAGES[i - 1] for i, s in enumerate(STAGES) if i > 0}


def _control(home: Path, stage: str) -> dict:
    p = home / "fake" / f"{stage}.json"
    return json.loads(p.read_text()) if p.exists() else {}


def _attempt(home: Path, stage: str) -> int:
    d = home / "fake"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "calls.log", "a") as f:
        f.write(stage + "\n")
    return sum(1 for line in (d / "calls.log").read_text().splitlines() if line == stage)


def body_for(stage: str):
    def body(ctx):
        from kernelrl.checkpoints import open_checkpoint_store
        from kernelrl.errors import KernelRLError

        home = Path(ctx.settings.home)
        ctrl = _control(home, stage)
        n = _attempt(home, stage)
        print(f"fake {stage}: attempt {n} recipe={ctx.recipe.name} digest={ctx.recipe.digest()}", flush=True)
        print(f"fake {stage}: a line on stderr", file=sys.stderr, flush=True)
        for i in range(int(ctrl.get("noise", 0))):
            print({"loss": 1.0 / (i + 1), "grad_norm": 0.5, "learning_rate": 1e-3, "epoch": i / 10,
                   "num_tokens": 1000 * i, "mean_token_accuracy": 0.1}, flush=True)
        if ctrl.get("warn"):
            import logging

            logging.getLogger("kernelrl.fake").warning(ctrl["warn"])
        if ctrl.get("dump_env"):
            (home / "fake" / f"{stage}.env.json").write_text(json.dumps(dict(os.environ)))
        if ctrl.get("user_error"):
            raise KernelRLError(f"fake {stage}: bad input")
        if n <= int(ctrl.get("fail_times", 0)):
            raise RuntimeError(f"fake {stage}: crash on attempt {n}")
        if n <= int(ctrl.get("hang_times", 0)):
            print(f"fake {stage}: hanging on attempt {n}", flush=True)
            time.sleep(120)
        up = ctx.upstream(PREV[stage]) if stage in PREV else None
        sleep_s = float(ctrl.get("sleep_s", 0))
        steps = 4
        for i in range(1, steps + 1):
            time.sleep(sleep_s / steps)
            print(f"KERNELRL_PROGRESS {i / steps:.2f} step {i}/{steps}", flush=True)
        outputs, metrics = {}, {"n_items": 3}
        if stage in ("sft", "selfsup", "crl"):
            local = ctx.work_dir / "model"
            local.mkdir(parents=True, exist_ok=True)
            (local / "weights.txt").write_text(f"{stage} {ctx.recipe.digest()} {up and up.get('wall_s')}")
            store = open_checkpoint_store(ctx.settings)
            name = f"runs/{ctx.run}/{stage}/final"
            store.put_dir(local, name)
            outputs["checkpoint"] = store.uri(name)
        if stage == "augment":
            metrics.update({"success_rate": 0.5, "speedups": [0.9, 1.0, 1.2, 2.0]})
        if stage == "bench":
            report = home / "reports" / ctx.run / "report.md"
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(f"# fake report for {ctx.run}\n")
            outputs["report"] = str(report)
            # the real bench step's headline keys (flows/stages.py HEADLINE_METRICS): the policy's row first
            metrics.update({"success_rate": 0.75, "speedup_p50": 1.1, "speedup_p90": 1.8, "mean_speedup": 1.3,
                            "policy_success_rate": 0.5, "policy_mean_speedup": 1.1, "run_best_mean_speedup": 1.3,
                            "teachers_best_mean_speedup": 1.6, "tasks": 4})
        return {"outputs": outputs, "metrics": metrics}

    return body


def main(stage: str) -> int:
    from kernelrl.config.settings import load_settings

    home = Path(load_settings().home)
    if _control(home, stage).get("no_manifest"):
        _attempt(home, stage)
        print(f"fake {stage}: exiting 0 without a manifest", flush=True)
        return 0
    return run_step(stage, body_for(stage))
