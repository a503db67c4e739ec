"""The project's own Dockerfiles built on this machine (no registry: local bases, see infra/ENGINES.md), and the
whole smoke pipeline run stage by stage in containers of the trainer image through the Prefect flow.

- ``containers/base.Dockerfile`` (base and flows targets) FROM the local Debian base; ``prefect`` runs in the
  flows image as its non-root user with no network;
- the smoke pipeline (reduced sizes) with ``runner="docker"``: augment, sft, selfsup, crl and bench each in
  its own ``kernelrl/trainer`` container (host network, the Postgres store, the mounted checkpoint dir); a second
  run with the same inputs skips every stage without starting a container;
- the bench stage in the evaluator image, which is where ``DockerRunner`` sends it by default (the runner clears
  the image's ``kernelrl worker`` entrypoint; the image carries steps/ and recipes/).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker
STAGES = ["augment", "sft", "selfsup", "crl", "bench"]
# The smoke recipe cut down to minutes on 2 cores: 2 tasks, a few steps, short completions.
REDUCED = {"task_limit": "2", "augment.max_trials": "2",
           "sft.epochs": "2", "sft.eval_samples_per_task": "1", "sft.eval_max_new_tokens": "48",
           "selfsup.iterations": "1", "selfsup.samples_per_task": "1", "selfsup.max_new_tokens": "48",
           "selfsup.eval_samples_per_task": "0",
           "crl.steps": "2", "crl.group_size": "2", "crl.prompts_per_step": "1", "crl.max_completion_length": "48",
           "crl.save_steps": "1", "crl.eval_samples_per_task": "0",
           "eval.budget_s": "0.2", "bench.budget_s": "0.2", "bench.correctness_trials": "2", "bench.plots": "false"}


def test_flows_image_from_local_base(docker_engine, flows_image):
    out = docker_engine.containers.run(flows_image, ["prefect", "version"], network_mode="none", remove=True)
    assert b"3.8.8" in out
    uid = docker_engine.containers.run(flows_image, ["id", "-u"], network_mode="none", remove=True)
    assert uid.strip() == b"1000"


def _started_containers(client, since: float) -> list[str]:
    """Names of kernelrl step containers created since ``since`` (from the engine's events)."""
    import datetime as dt

    events = client.events(since=dt.datetime.fromtimestamp(since), until=dt.datetime.now(), decode=True,
                           filters={"type": "container", "event": "create",
                                    "label": "kernelrl.managed-by=kernelrl-flows"})
    return [e["Actor"]["Attributes"].get("name", "") for e in events]


def test_smoke_pipeline_all_stages_in_trainer_containers(docker_engine, trainer_image, step_env, prefect_harness):
    from flows.pipeline import pipeline

    images = {"trainer": trainer_image, "generator": trainer_image, "bench": trainer_image}
    t0 = time.time()
    out = pipeline(run="dsmoke", recipe="smoke", overrides=REDUCED, runner="docker",
                   runner_options={"images": images}, retries=0)
    wall = time.time() - t0
    assert out["stages"] == dict.fromkeys(STAGES, "done")
    assert out["report"] and Path(out["report"]).exists()
    started = _started_containers(docker_engine, t0)
    assert sorted(n.split("-")[2] for n in started) == sorted(STAGES), started  # one container per stage
    from kernelrl.store import Store

    store = Store(step_env["store_url"])
    try:
        recs = {s: store.stage_record("dsmoke", s) for s in STAGES}
    finally:
        store.engine.dispose()
    assert all(r["status"] == "done" and r["attempts"] == 1 for r in recs.values())
    for stage in ("sft", "selfsup", "crl"):  # trained models synced to the mounted checkpoint dir
        ckpt = Path(str(recs[stage]["manifest"]["outputs"]["checkpoint"]).removeprefix("file://"))
        assert ckpt.is_relative_to(step_env["checkpoints"]) and ckpt.exists(), recs[stage]["manifest"]

    t1 = time.time()
    again = pipeline(run="dsmoke", recipe="smoke", overrides=REDUCED, runner="docker",
                     runner_options={"images": images}, retries=0)
    assert again["stages"] == dict.fromkeys(STAGES, "skipped")
    assert _started_containers(docker_engine, t1) == []
    print(f"\ndocker: smoke pipeline (reduced), 5 stages in containers: {wall:.0f} s; re-run skipped all")


def test_bench_step_in_the_evaluator_image(docker_engine, evaluator_image, trainer_image, step_env):
    from flows.runner import DockerRunner

    runner = DockerRunner(images={"trainer": trainer_image, "evaluator": evaluator_image})
    out = step_env["home"] / "manifests"
    runner.run("augment", "devb", "smoke", {"task_limit": "1", "augment.max_trials": "2"}, out / "augment.json")
    m = runner.run("bench", "devb", "smoke", {"task_limit": "1", "bench.levels": "[1]", "bench.budget_s": "0.2",
                                              "bench.correctness_trials": "2", "bench.plots": "false"},
                   out / "bench.json")
    assert m["status"] == "done"
