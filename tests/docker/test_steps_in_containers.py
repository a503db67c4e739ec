"""Real steps in real containers through the real DockerRunner (docker-py) on a private engine.

Each step container uses host networking (never a bridge: infra/ENGINES.md), writes to a fresh database on the
host's Postgres (127.0.0.1:5432), and has the home and checkpoint folders mounted at their host paths.

- a ``--dry-run`` of a real step, a real small step (augment on one task, evaluating seeds with the real
  evaluator inside the container), then a real bench step that copies its report to the checkpoint dir;
- a user error in a container is a non-retryable StepFailed (exit 2);
- a stage container killed mid-run (``docker kill``) is retried by the flow's task and resumes from its own
  checkpoint, and what the step printed inside its container is in the Prefect flow run's logs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker


def _runner_cls():
    from flows.runner import DockerRunner

    class DryRunDockerRunner(DockerRunner):
        """The real runner with ``--dry-run`` appended (the runner has no dry-run switch of its own)."""

        def container_spec(self, *a, **kw):
            spec = super().container_spec(*a, **kw)
            spec["command"] = [*spec["command"], "--dry-run"]
            return spec

    return DockerRunner, DryRunDockerRunner


def _store(url):
    from kernelrl.store import Store

    return Store(url)


def _count(store, table: str, run: str) -> int:
    from sqlalchemy import text

    with store.engine.connect() as c:
        return c.execute(text(f"select count(*) from {table} where run_name = :r"), {"r": run}).scalar()


def test_dry_run_real_step_and_bench_in_containers(docker_engine, step_image, step_env, caplog):
    DockerRunner, DryRun = _runner_cls()
    images = {"trainer": step_image, "evaluator": step_image, "generator": step_image}
    out = step_env["home"] / "manifests"
    caplog.set_level(logging.INFO, logger="kernelrl.steps")

    t0 = time.monotonic()
    m = DryRun(images=images).run("augment", "dk1", "smoke", {"task_limit": "1"}, out / "augment.json")
    dry_s = time.monotonic() - t0
    assert m["stage"] == "augment" and m["dry_run"] is True and m["metrics"]["tasks"] == 1
    assert json.loads((out / "augment.json").read_text()) == m  # written by the container on the mounted dir
    store = _store(step_env["store_url"])
    try:
        assert store.stage_record("dk1", "augment")["status"] == "done"  # recorded in Postgres from the container

        # The real step: seed-corpus augmentation of one task, every candidate evaluated inside the container.
        t0 = time.monotonic()
        m = DockerRunner(images=images).run("augment", "dk1", "smoke",
                                            {"task_limit": "1", "augment.max_trials": "2"}, out / "augment.json")
        real_s = time.monotonic() - t0
        assert m["status"] == "done" and m["dry_run"] is False
        assert m["metrics"]["attempts"] == 2 and m["metrics"]["successes"] >= 1
        assert _count(store, "attempts", "dk1") == 2
        # the container's own output reached the runner's log, line by line
        text = "\n".join(r.getMessage() for r in caplog.records)
        assert "augment | " in text and "manifest received" in text

        # bench: re-scores the run's best kernel and copies its report to the (mounted) checkpoint dir
        m = DockerRunner(images=images).run("bench", "dk1", "smoke",
                                            {"task_limit": "1", "bench.levels": "[1]", "bench.budget_s": "0.2",
                                             "bench.correctness_trials": "2", "bench.plots": "false"},
                                            out / "bench.json")
        assert m["status"] == "done" and m["metrics"]["tasks"] == 1
        assert Path(m["outputs"]["report"]).exists()
        reports = list(step_env["checkpoints"].rglob("report.md"))
        assert reports, f"no report under the checkpoint dir: {list(step_env['checkpoints'].rglob('*'))}"
    finally:
        store.engine.dispose()
    assert not docker_engine.containers.list(all=True, filters={"label": "kernelrl.run=dk1"})  # removed
    print(f"\ndocker: dry-run step {dry_s:.1f} s, real augment step {real_s:.1f} s")


def test_user_error_in_a_container_is_not_retryable(docker_engine, step_image, step_env):
    from flows.runner import DockerRunner, StepFailed

    with pytest.raises(StepFailed) as e:  # sft before augment: the step's one-line error, exit 2
        DockerRunner(images={"trainer": step_image}).run("sft", "dk-noup", "smoke", {}, step_env["home"] / "m.json")
    assert e.value.retryable is False and e.value.exit_code == 2
    assert "has not finished" in str(e.value)


# -- killed mid-run, retried, resumed; container logs in Prefect ---------------------------------------------------
class Killer(threading.Thread):
    """Waits for the sft container to have written a trainer checkpoint, then ``docker kill``s it (once)."""

    def __init__(self, client, run: str, trainer_dir: Path, timeout_s: float = 900):
        super().__init__(daemon=True)
        self.client, self.run_name, self.trainer_dir, self.timeout_s = client, run, trainer_dir, timeout_s
        self.killed: str | None = None
        self.checkpoint_at_kill: list[str] = []
        self.stop = threading.Event()

    def run(self):
        deadline = time.monotonic() + self.timeout_s
        while not self.stop.is_set() and time.monotonic() < deadline:
            done = sorted(p.name for p in self.trainer_dir.glob("checkpoint-*") if (p / "trainer_state.json").exists())
            if done:
                for c in self.client.containers.list(filters={"label": [f"kernelrl.run={self.run_name}",
                                                                         "kernelrl.stage=sft"]}):
                    c.kill()  # SIGKILL: no chance to save anything more
                    self.killed = c.name
                    self.checkpoint_at_kill = done
                    return
            time.sleep(0.1)


def test_killed_stage_container_is_retried_and_resumes_and_logs_reach_prefect(docker_engine, step_image, step_env,
                                                                              prefect_harness):
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    from flows.pipeline import pipeline

    run = "dkill"
    images = {"trainer": step_image, "evaluator": step_image, "generator": step_image}
    overrides = {"task_limit": "1", "augment.max_trials": "2", "sft.epochs": "40", "sft.save_steps": "4",
                 "sft.batch_size": "1", "sft.contrastive_copies": "0", "sft.eval_samples_per_task": "0",
                 "sft.lora": "false"}
    killer = Killer(docker_engine, run, step_env["home"] / "runs" / run / "sft" / "trainer")
    killer.start()
    t0 = time.monotonic()
    try:
        state = pipeline(run=run, recipe="smoke", stages=["augment", "sft"], overrides=overrides, runner="docker",
                         runner_options={"images": images}, retries=1, retry_delay_s=0, return_state=True)
    finally:
        killer.stop.set()
        killer.join(5)
    wall = time.monotonic() - t0
    assert killer.killed, "the sft container finished before a checkpoint was seen (nothing was killed)"
    assert state.is_completed(), state.message
    out = state.result()
    assert out["stages"] == {"augment": "done", "sft": "done"}

    store = _store(step_env["store_url"])
    try:
        rec = store.stage_record(run, "sft")
        assert rec["status"] == "done" and rec["attempts"] == 2  # killed once, retried once
        assert store.stage_record(run, "augment")["attempts"] == 1  # not re-run by sft's retry
    finally:
        store.engine.dispose()
    m = rec["manifest"]
    resumed = m["metrics"]["resumed_from"]
    assert resumed and Path(resumed).name.startswith("checkpoint-"), m["metrics"]
    assert int(Path(resumed).name.split("-")[1]) >= int(killer.checkpoint_at_kill[-1].split("-")[1])
    assert m["metrics"]["steps"] == 40  # the resumed run finished the whole schedule
    ckpt = Path(m["outputs"]["checkpoint"].removeprefix("file://"))
    assert ckpt.is_relative_to(step_env["checkpoints"]) and ckpt.exists()  # synced to the mounted checkpoint dir

    # Logs printed inside the containers are in the flow run's Prefect logs.
    APILogHandler().flush()
    flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
    text = ""
    for _ in range(40):
        with get_client(sync_client=True) as client:
            text = "\n".join(log.message for log in client.read_logs(flt))
        if "sft: resuming from" in text:
            break
        time.sleep(0.5)
    assert "sft: resuming from" in text  # logged by the trainer inside the second container
    assert "augment seed-corpus" in text  # logged by the augment step inside its container
    assert "exit 137" in text or "SIGKILL" in text  # the runner reported the kill before the retry
    print(f"\ndocker: augment + sft killed and resumed in {wall:.1f} s (killed {killer.killed} after "
          f"{killer.checkpoint_at_kill[-1]}, resumed from {Path(resumed).name})")
