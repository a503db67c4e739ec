"""Deployments on a real Prefect server (``prefect server start`` on loopback) with a real worker: infra/prefect.yaml
deploys, and ``prefect flow-run retry`` of a failed pipeline run re-runs only the failed stage and the ones after
it. Uses a process work pool and the fake steps (the Docker work pool needs an engine: the docker suite)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).parent / "prefect")
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DO_NOT_TRACK="1", KERNELRL_HOME=str(tmp_path / "home"))
    env.pop("PREFECT_API_URL", None)
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"prefect server did not start: {(tmp_path / 'server.log').read_text()[-2000:]}")
                time.sleep(1)
        env["PREFECT_API_URL"] = url
        yield env
    finally:
        _stop(proc)
        log.close()


def prefect(env, *args, timeout=180):
    r = subprocess.run([PREFECT, "--no-prompt", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def flow_run_state(env, name: str) -> tuple[str, str]:
    code = ("from prefect import get_client\n"
            "with get_client(sync_client=True) as c:\n"
            f"    frs = [f for f in c.read_flow_runs() if f.name == {name!r}]\n"
            "    print(*((frs[0].id, frs[0].state.type.value) if frs else ('-', 'MISSING')))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    fid, state = out.stdout.split()
    return fid, state


def wait_state(env, name: str, states: set[str], timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fid, state = flow_run_state(env, name)
        if state in states:
            return fid
        time.sleep(2)
    pytest.fail(f"flow run {name} not in {states} after {timeout} s (last: {state})")


def test_deploy_infra_and_flow_run_retry(server, tmp_path):
    env = server
    # `make deploy` creates its work pool and deploys infra/prefect.yaml as written: the scheduled pipeline and
    # one deployment per stage (a second `make deploy` finds the pool)
    for _ in range(2):
        r = subprocess.run(["make", "--no-print-directory", "deploy"], env=env, cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    prefect(env, "work-pool", "inspect", "kernelrl-docker")  # exit 0: the pool exists
    listing = prefect(env, "deployment", "ls")
    for name in ("kernelrl-pipeline/scheduled", "kernelrl-augment/default", "kernelrl-bench/default"):
        assert name in listing.replace("\n", "")

    # a failed run, then `prefect flow-run retry`: finished stages skip, crl runs again, then bench
    home = Path(env["KERNELRL_HOME"])
    (home / "fake").mkdir(parents=True)
    (home / "fake" / "crl.json").write_text(json.dumps({"fail_times": 1}))
    prefect(env, "work-pool", "create", "local-proc", "--type", "process")
    params = {"run": "d1", "module_prefix": "tests.fake_steps", "retries": 0, "retry_delay_s": 0}
    prefect(env, "deploy", "flows/pipeline.py:pipeline", "-n", "fake", "-p", "local-proc", "--params",
            json.dumps(params))
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "local-proc", "--type", "process"], env=env,
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        prefect(env, "deployment", "run", "kernelrl-pipeline/fake")
        fid = wait_state(env, "d1", {"FAILED", "COMPLETED", "CRASHED"})
        assert flow_run_state(env, "d1")[1] == "FAILED"
        calls = (home / "fake" / "calls.log").read_text().split()
        assert calls == ["augment", "sft", "selfsup", "crl"]
        prefect(env, "flow-run", "retry", fid)
        time.sleep(3)
        wait_state(env, "d1", {"COMPLETED", "FAILED", "CRASHED"})
        assert flow_run_state(env, "d1")[1] == "COMPLETED"
        calls = (home / "fake" / "calls.log").read_text().split()
        assert calls == ["augment", "sft", "selfsup", "crl", "crl", "bench"]
    finally:
        _stop(worker)
        log.close()
