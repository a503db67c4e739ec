"""GPU recipes on a CPU machine: the GPU recipe validates, the dedicated-GPU rule, the device assignment the local
runner gives each stage, and the evaluator fleet's worker processes (real workers on the CPU, a fake evaluate
function; the same code runs one worker per evaluator GPU on a GPU host, bench/gpu_pipeline.sh)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from flows.gpu_launch import launch_prefix
from flows.local_runner import LocalProcessRunner
from flows.runner import StepFailed
from kernelrl.config.gpus import GpuPlan, local_eval_workers
from kernelrl.config.recipes import load_recipe
from kernelrl.errors import ConfigError

FAKE = "tests.fake_steps"


def test_the_gpu_recipe_validates_and_fits_two_and_four_gpu_hosts():
    r = load_recipe("gpu-smoke")
    assert r.eval.device == "cuda" and r.eval.reverify
    assert r.crl.steps >= 50 and r.crl.max_completion_length >= 2048 and r.crl.eval_samples_per_task >= 8
    four = GpuPlan.from_recipe(r.gpus, visible=4, parent_visible="")
    assert (four.train, four.evaluate) == ([0], [1, 2, 3])
    two = GpuPlan.from_recipe(r.gpus, visible=2, parent_visible="")
    assert (two.train, two.evaluate) == ([0], [1])
    dp = GpuPlan.from_recipe({**r.gpus, "train": [0, 1]}, visible=4, parent_visible="")
    assert dp.evaluate == [2, 3] and dp.processes("sft") == dp.processes("crl") == 2 and dp.processes("selfsup") == 1
    with pytest.raises(ConfigError, match="does not exist"):
        GpuPlan.from_recipe(r.gpus, visible=0)  # a GPU recipe on a CPU machine: one clear line


@pytest.mark.parametrize("gpus, match", [
    ({"train": [0, 1], "evaluate": [1, 2]}, "dedicated GPUs"),
    ({"train": [0], "generate": [2], "evaluate": [2, 3]}, "dedicated GPUs"),
    ({"train": [0], "evaluate": [7]}, "GPU 7 does not exist"),
    ({"train": [0, 1, 2, 3], "evaluate": "rest"}, "leaves no GPU"),
    ({"evaluate": [1]}, "must name the policy"),
    ({"train": "rest"}, "only for evaluate"),
    ({"train": [0, 0]}, "listed twice"),
    ({"train": ["a"]}, "list of GPU indices"),
    ({"trainers": [0]}, "unknown role"),
])
def test_gpu_layout_rules(gpus, match):
    with pytest.raises(ConfigError, match=match):
        GpuPlan.from_recipe(gpus, visible=4, parent_visible="")


def test_roles_map_to_the_gpus_this_process_sees():
    plan = GpuPlan.from_recipe({"train": [0, 1], "evaluate": "rest"}, visible=4, parent_visible="4,5,6,7")
    assert plan.stage_env("crl") == {"CUDA_VISIBLE_DEVICES": "4,5", "KERNELRL_EVAL_LOCAL_WORKERS": "0"}
    # one process sees one GPU (Trainer would wrap the model in nn.DataParallel, which trl's SFTTrainer refuses)
    assert plan.stage_env("selfsup")["CUDA_VISIBLE_DEVICES"] == "4"
    assert plan.stage_env("bench")["CUDA_VISIBLE_DEVICES"] == "4"  # bench only submits jobs; evaluators are 6, 7
    assert plan.to_dict()["physical"]["evaluate"] == "6,7"
    assert GpuPlan.from_recipe({}, visible=4) is None


def test_data_parallel_stages_get_accelerate_one_process_per_training_gpu():
    plan = GpuPlan.from_recipe({"train": [0, 1], "evaluate": "rest"}, visible=4, parent_visible="")
    cmd = launch_prefix(plan, "crl", "py", None)
    assert cmd[:3] == ["py", "-m", "accelerate.commands.launch"] and cmd[cmd.index("--num_processes") + 1] == "2"
    assert "--main_process_port" in cmd and "--multi_gpu" in cmd
    assert launch_prefix(plan, "selfsup", "py", None) is None
    one = GpuPlan.from_recipe({"train": [0], "evaluate": "rest"}, visible=4, parent_visible="")
    assert launch_prefix(one, "crl", "py", None) is None

    class R:
        accelerate = {"num_processes": 3}

    with pytest.raises(ConfigError, match="one process per training GPU"):
        launch_prefix(plan, "sft", "py", R())

    class Odd:  # sft.batch_size is the step's batch, split over the processes: refused before any launch
        accelerate: dict = {}
        sft = type("S", (), {"batch_size": 3})()

    with pytest.raises(ConfigError, match="multiple of 2"):
        launch_prefix(plan, "sft", "py", Odd())
    assert launch_prefix(plan, "crl", "py", Odd())  # crl's batch is its own (prompts x group)


def test_no_local_evaluation_worker_beside_evaluator_gpus():
    gpus = {"train": [0], "evaluate": [1, 2, 3]}
    assert local_eval_workers(gpus, {}) == 0
    assert local_eval_workers(gpus, {"KERNELRL_EVAL_LOCAL_WORKERS": "0"}) == 0
    with pytest.raises(ConfigError, match="dedicated GPUs only"):
        local_eval_workers(gpus, {"KERNELRL_EVAL_LOCAL_WORKERS": "1"})
    assert local_eval_workers({}, {}) == 1  # the embedded default: one in-process worker
    assert local_eval_workers(None, {"KERNELRL_EVAL_LOCAL_WORKERS": "2"}) == 2
    with pytest.raises(ConfigError, match="integer"):
        local_eval_workers(None, {"KERNELRL_EVAL_LOCAL_WORKERS": "two"})


def test_a_stage_service_runs_no_worker_when_the_recipe_names_evaluator_gpus(tmp_path, monkeypatch):
    from kernelrl.config.stages import EvalConfig
    from kernelrl.store import Store
    from kernelrl.training.common import eval_service

    monkeypatch.delenv("KERNELRL_EVAL_LOCAL_WORKERS", raising=False)
    st = Store(f"sqlite:///{tmp_path / 's.db'}")
    st.upgrade()
    with eval_service(st, EvalConfig(device="cpu"), {"train": [0], "evaluate": "rest"}) as svc:
        assert svc.workers == []
    with eval_service(st, EvalConfig(device="cpu")) as svc:
        assert len(svc.workers) == 1


def gpu_recipe(tmp_path: Path, gpus: dict) -> str:
    data = yaml.safe_load(Path("recipes/smoke.yaml").read_text())
    data["gpus"] = gpus
    p = tmp_path / "gpu-test.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_the_local_runner_gives_each_stage_its_gpus(isolated_home, tmp_path, monkeypatch):
    import kernelrl.config.gpus as g

    monkeypatch.setattr(g, "visible_gpus", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    recipe = gpu_recipe(tmp_path, {"train": [2], "evaluate": "rest"})
    d = isolated_home / "fake"
    d.mkdir(parents=True)
    (d / "augment.json").write_text(json.dumps({"dump_env": True}))
    runner = LocalProcessRunner(module_prefix=FAKE, kill_grace_s=1.0)
    runner.run("augment", "r1", recipe, {}, tmp_path / "a.json")
    env = json.loads((d / "augment.env.json").read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["KERNELRL_EVAL_LOCAL_WORKERS"] == "0"
    assert runner.gpu_launch("crl", recipe, {"gpus.train": "[0, 1]"})[1][2] == "accelerate.commands.launch"
    assert runner.gpu_launch("crl", "smoke", {}) == ({}, None)  # no gpus: the embedded default, untouched
    bad = gpu_recipe(tmp_path, {"train": [0, 1], "evaluate": [1]})
    with pytest.raises(StepFailed) as e:
        runner.run("augment", "r1", bad, {}, tmp_path / "b.json")
    assert not e.value.retryable and "dedicated GPUs" in str(e.value)


def test_fleet_workers_share_the_queue_and_a_killed_worker_s_job_is_taken_over(isolated_home):
    """Two fleet workers (CPU here, one per evaluator GPU on a GPU host) drain one queue; SIGKILL one while it
    holds a job: its lease lapses, the other finishes the job, and every job has exactly one evaluation."""
    from flows.fleet import EvaluatorFleet
    from kernelrl.config.stages import EvalConfig
    from kernelrl.evaluation.service import EvalRequest, EvalService
    from kernelrl.store import Store
    from kernelrl.store.queue import JobQueue
    from kernelrl.tasks import get_task

    # each job takes 3 s, so the job of the worker killed within ~0.1 s of being seen running cannot finish first
    # (with 1.5 s and a loaded CPU, the victim once completed it before the kill landed). In the candidate source:
    # the fleet's workers get an allow-listed environment, so FAKE_EVAL_SLEEP never reached them and each job took
    # 10 ms; the poll below caught one running only by luck (it missed them all once in a full make test run)
    st = Store(None)
    st.upgrade()
    fleet = EvaluatorFleet(["cpu", "cpu"], "f1", isolated_home, lease_s=2.0, reverify_wait_s=0.0, grace_s=5.0,
                           extra_args=("--evaluate-fn", "tests._fake_eval:fake_evaluate", "--idle-sleep-s", "0.1"))
    task = get_task("builtin/L1/01_DiagMatmul")
    with fleet.start():
        assert len(json.loads((isolated_home / "runs" / "f1" / "fleet.json").read_text())["workers"]) == 2
        svc = EvalService(st, EvalConfig(device="cpu", reverify=False), local_workers=0, evaluator_version="fake-1")
        ids = svc.submit_many([EvalRequest(task, f"# fake-speedup: 1.{i}\n# fake-sleep: 3\nx = {i}\n")
                               for i in range(3)])
        q = JobQueue(st)
        victim = None
        # the first job a fleet worker holds; the fleet does not wait for its workers to serve: two cold worker
        # processes on the 2-core CI machine took over 15 s to claim once (a fresh clone, 2026-11-27), over 60 s once
        # in a full make test run beside other work (2026-11-28): up to 4 minutes
        for _ in range(4800):
            running = [s for s in q.status(ids).values() if s.status == "running"]
            if running:
                victim = running[0]
                break
            time.sleep(0.05)
        assert victim is not None, "no fleet worker claimed a job"
        w = next(w for w in fleet.workers if w["worker_id"] == victim.worker)
        vid = next(i for i, st_ in q.status(ids).items() if st_.candidate_id == victim.candidate_id)
        os.kill(w["pid"], signal.SIGKILL)
        assert q.status([vid])[vid].status == "running"  # killed while it held the job
        results = svc.wait(ids, timeout_s=90)
        assert all(r["success"] for r in results)
        assert fleet.alive() == [x["device"] for x in fleet.workers if x["pid"] != w["pid"]]
    finals = q.status(ids)
    taken_over = next(s for s in finals.values() if s.candidate_id == victim.candidate_id)
    assert taken_over.worker != victim.worker  # finished by the surviving worker
    from sqlalchemy import text

    with st.engine.connect() as c:
        per_candidate = c.execute(text("select candidate_id, count(*) from evaluations group by candidate_id")).all()
    assert len(per_candidate) == 3 and all(n == 1 for _, n in per_candidate)  # none lost, none duplicated
