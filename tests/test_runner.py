"""The local step runner on the fake steps (real processes, real store, real checkpoint dir; no Prefect)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from flows.runner import (
    LocalProcessRunner,
    StepFailed,
    exit_failure,
    make_runner,
    step_args,
    step_env,
)
from kernelrl.errors import ConfigError

FAKE = "tests.fake_steps"


def control(home: Path, stage: str, **kw) -> None:
    d = home / "fake"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stage}.json").write_text(json.dumps(kw))


def calls(home: Path) -> list[str]:
    p = home / "fake" / "calls.log"
    return p.read_text().split() if p.exists() else []


@pytest.fixture
def runner():
    return LocalProcessRunner(module_prefix=FAKE, kill_grace_s=1.0)


def test_runs_a_step_streams_logs_and_progress(isolated_home, tmp_path, runner, caplog):
    seen = []
    with caplog.at_level(logging.INFO, logger="kernelrl.steps"):
        m = runner.run("augment", "r1", "smoke", {"seed": 3}, tmp_path / "m" / "augment.json",
                       on_progress=lambda f, msg: seen.append((f, msg)))
    assert m["stage"] == "augment" and m["run"] == "r1" and m["status"] == "done"
    assert json.loads((tmp_path / "m" / "augment.json").read_text()) == m
    assert seen == [(0.25, "step 1/4"), (0.5, "step 2/4"), (0.75, "step 3/4"), (1.0, "step 4/4")]
    text = caplog.text
    assert "fake augment: attempt 1" in text  # stdout, line by line
    assert "fake augment: a line on stderr" in text  # stderr too
    assert "KERNELRL_MANIFEST" not in text  # the manifest line is consumed, not logged
    from kernelrl.store import Store

    rec = Store(f"sqlite:///{isolated_home / 'store.db'}").stage_record("r1", "augment")
    assert rec["status"] == "done" and rec["manifest"]["metrics"]["success_rate"] == 0.5


def test_crash_is_retryable_user_error_is_not(isolated_home, tmp_path, runner):
    control(isolated_home, "augment", fail_times=1)
    with pytest.raises(StepFailed) as e:
        runner.run("augment", "r1", "smoke", {}, tmp_path / "a.json")
    assert e.value.retryable and e.value.exit_code == 1
    assert "crash on attempt 1" in str(e.value)  # the telling line of the traceback
    runner.run("augment", "r1", "smoke", {}, tmp_path / "a.json")  # second attempt passes

    control(isolated_home, "augment", user_error=True)
    with pytest.raises(StepFailed) as e:
        runner.run("augment", "r1", "smoke", {}, tmp_path / "a.json")
    assert not e.value.retryable and e.value.exit_code == 2 and "bad input" in str(e.value)


def test_bad_recipe_override_is_a_user_error(isolated_home, tmp_path, runner):
    with pytest.raises(StepFailed) as e:
        runner.run("augment", "r1", "smoke", {"sft.epochs": "three"}, tmp_path / "a.json")
    assert not e.value.retryable and "sft.epochs" in str(e.value)


def test_exit_zero_without_manifest_is_retryable(isolated_home, tmp_path, runner):
    control(isolated_home, "augment", no_manifest=True)
    with pytest.raises(StepFailed) as e:
        runner.run("augment", "r1", "smoke", {}, tmp_path / "a.json")
    assert e.value.retryable and "without writing a manifest" in str(e.value)


def test_missing_upstream_is_a_user_error(isolated_home, tmp_path, runner):
    with pytest.raises(StepFailed) as e:
        runner.run("sft", "r1", "smoke", {}, tmp_path / "s.json")
    assert not e.value.retryable and "augment" in str(e.value)


def test_timeout_kills_the_step_and_is_retryable(isolated_home, tmp_path):
    control(isolated_home, "augment", hang_times=1)
    r = LocalProcessRunner(module_prefix=FAKE, timeout_s=3, kill_grace_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(StepFailed) as e:
        r.run("augment", "r1", "smoke", {}, tmp_path / "a.json")
    assert e.value.retryable and "timed out" in str(e.value)
    assert time.monotonic() - t0 < 30
    from kernelrl.store import Store

    # killed mid-run: its record still says running (not done), so the flow runs it again
    assert Store(f"sqlite:///{isolated_home / 'store.db'}").stage_record("r1", "augment")["status"] == "running"
    # the retry runs without the 3 s limit: a loaded 2-core machine can need longer just to start Python
    retry = LocalProcessRunner(module_prefix=FAKE, timeout_s=120, kill_grace_s=1.0)
    assert retry.run("augment", "r1", "smoke", {}, tmp_path / "a.json")["status"] == "done"


def test_env_is_an_allow_list(isolated_home, tmp_path, runner, monkeypatch):
    monkeypatch.setenv("KERNELRL_LLM_API_KEY", "sk-teacher")
    monkeypatch.setenv("KERNELRL_S3_SECRET_ACCESS_KEY", "s3-secret")
    monkeypatch.setenv("KERNELRL_LOG_LEVEL", "WARNING")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak")
    monkeypatch.setenv("PREFECT_API_KEY", "leak")
    monkeypatch.setenv("GITHUB_TOKEN", "leak")
    monkeypatch.setenv("SOME_RANDOM_VAR", "leak")
    for stage in ("augment", "sft"):
        control(isolated_home, stage, dump_env=True)
    runner.run("augment", "r1", "smoke", {}, tmp_path / "a.json")
    runner.run("sft", "r1", "smoke", {}, tmp_path / "s.json")
    aug = json.loads((isolated_home / "fake" / "augment.env.json").read_text())
    sft = json.loads((isolated_home / "fake" / "sft.env.json").read_text())
    for env in (aug, sft):
        assert "leak" not in env.values()
        assert env["KERNELRL_LOG_LEVEL"] == "WARNING" and env["OMP_NUM_THREADS"] == "1"
        assert env["HF_HUB_OFFLINE"] == "1" and "PATH" in env
        assert env["KERNELRL_S3_SECRET_ACCESS_KEY"] == "s3-secret"
    assert aug["KERNELRL_LLM_API_KEY"] == "sk-teacher"  # teachers live in augmentation only
    assert "KERNELRL_LLM_API_KEY" not in sft


def test_step_env_and_args_units():
    env = step_env("bench", {"KERNELRL_LLM_API_KEY": "x", "KERNELRL_HOME": "/h", "VLLM_API_KEY": "v",
                             "VLLM_CPU_KVCACHE_SPACE": "1", "NCCL_DEBUG": "INFO", "LD_PRELOAD": "evil.so"})
    assert env == {"KERNELRL_HOME": "/h", "VLLM_CPU_KVCACHE_SPACE": "1", "NCCL_DEBUG": "INFO",
                   "PYTHONUNBUFFERED": "1"}
    assert step_args("sft", "r", "smoke", {"sft.epochs": "1", "levels": [1, 2], "sft.lora": True}, "/o/m.json") == [
        "--recipe", "smoke", "--run", "r", "--manifest-out", "/o/m.json", "--set", "sft.epochs=1",
        "--set", "levels=[1, 2]", "--set", "sft.lora=true"]
    assert exit_failure("x", -9, "").retryable and "SIGKILL" in str(exit_failure("x", -9, ""))
    assert "SIGKILL" in str(exit_failure("x", 137, ""))  # a container killed by the OOM killer
    assert not exit_failure("x", 2, "error: bad").retryable
    with pytest.raises(ConfigError):
        make_runner("kubernetes")


def test_step_failed_pickles():
    import pickle

    e = pickle.loads(pickle.dumps(StepFailed("sft", "exit 3", retryable=True, exit_code=3)))
    assert e.retryable and e.exit_code == 3 and e.stage == "sft" and str(e) == "step sft: exit 3"


def test_step_dies_with_a_killed_runner(isolated_home, tmp_path):
    """A flow process killed with SIGKILL (no cleanup runs) must not leave its step running."""
    import os
    import signal
    import subprocess
    import sys

    control(isolated_home, "augment", hang_times=1)
    code = ("from pathlib import Path\nfrom flows.runner import LocalProcessRunner\n"
            f"LocalProcessRunner(module_prefix={FAKE!r}).run('augment', 'r1', 'smoke', {{}}, "
            f"Path({str(tmp_path / 'a.json')!r}))")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    deadline = time.monotonic() + 60
    while "augment" not in calls(isolated_home) and time.monotonic() < deadline:
        time.sleep(0.2)
    out = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout.split()
    assert out, "the step process should be running"
    step_pid = int(out[0])
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(step_pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{step_pid}/stat").exists() and Path(f"/proc/{step_pid}/stat").read_text().split()[2] == "Z":
            break  # exited; a zombie waiting for init to reap it
        time.sleep(0.2)
    else:
        os.kill(step_pid, signal.SIGKILL)
        pytest.fail("the step outlived its killed runner")


def test_runs_in_the_callers_directory(isolated_home, tmp_path, runner, monkeypatch):
    """A recipe given as a relative path resolves where the user ran the command, as a .env file would."""
    import shutil

    shutil.copy(Path(__file__).resolve().parents[1] / "recipes" / "smoke.yaml", tmp_path / "mine.yaml")
    monkeypatch.chdir(tmp_path)
    m = runner.run("augment", "r1", "mine.yaml", {}, Path("out/a.json"))
    assert m["recipe"] == "mine" and (tmp_path / "out" / "a.json").exists()
