"""The throw-away evaluation container's launch spec (docker-py ``containers.run`` kwargs), checked without a
Docker engine: one GPU by UUID, no network, read-only root with an exec tmpfs, no capabilities, limits, a
non-root user and an environment with no secrets. Also the evaluator Dockerfile's shape; the image build itself
needs an engine with registry access (not run here)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kernelrl.errors import ConfigError
from kernelrl.evaluation.docker_sandbox import SAFE_ENV_KEYS, container_spec, run_in_container

UUID = "GPU-8f6c2d1e-3b4a-4c5d-9e8f-0a1b2c3d4e5f"
ROOT = Path(__file__).resolve().parents[1]


def test_one_gpu_by_uuid_no_network_limits(tmp_path):
    spec = container_spec("kernelrl/evaluator:test", UUID, job_dir=tmp_path, mem_limit="16g", pids_limit=2048)
    [req] = spec["device_requests"]
    assert req["DeviceIDs"] == [UUID] and req["Capabilities"] == [["gpu"]] and req.get("Count") in (None, 0)
    assert spec["network_mode"] == "none"
    assert spec["read_only"] is True
    opts = spec["tmpfs"]["/tmp"].split(",")
    assert "rw" in opts and "exec" in opts and "noexec" not in opts and any(o.startswith("size=") for o in opts)
    assert spec["cap_drop"] == ["ALL"] and "cap_add" not in spec and not spec.get("privileged")
    assert "no-new-privileges" in spec["security_opt"]
    assert spec["pids_limit"] == 2048 and spec["mem_limit"] == "16g" and spec["memswap_limit"] == "16g"
    assert spec["user"].split(":")[0] not in ("0", "root", "")
    assert spec["volumes"] == {str(tmp_path.resolve()): {"bind": "/job", "mode": "ro"}}  # the job, read-only
    assert spec["entrypoint"][:3] == ["python", "-m", "kernelrl.evaluation.docker_sandbox"]
    assert spec["init"] is True and spec["detach"] is True
    assert not any(k in spec for k in ("ports", "network", "devices", "pid_mode", "cgroupns"))


def test_environment_carries_no_secrets(tmp_path, monkeypatch):
    planted = {"KERNELRL_STORE_URL": "postgresql://u:hunter2@db/k", "AWS_SECRET_ACCESS_KEY": "hunter2",
               "KERNELRL_S3_SECRET_ACCESS_KEY": "hunter2", "OPENAI_API_KEY": "sk-hunter2", "HF_TOKEN": "hf_hunter2",
               "DATABASE_URL": "postgresql://hunter2"}
    for k, v in planted.items():
        monkeypatch.setenv(k, v)
    spec = container_spec("img", UUID, job_dir=tmp_path, cache_dir=tmp_path / "cache")
    env = spec["environment"]
    assert set(env) <= set(SAFE_ENV_KEYS)
    assert "hunter2" not in repr(spec)
    assert env["HOME"].startswith("/tmp") and env["TORCH_EXTENSIONS_DIR"].startswith("/cache")
    assert spec["volumes"][str((tmp_path / "cache").resolve())] == {"bind": "/cache", "mode": "rw"}


@pytest.mark.parametrize("bad", ["", None, f"{UUID},GPU-other", "all", "0"])
def test_exactly_one_gpu(tmp_path, bad):
    with pytest.raises(ConfigError):  # 'all' would hand over every GPU; an index depends on the host's order
        container_spec("img", bad, job_dir=tmp_path)
    with pytest.raises(ConfigError):
        container_spec("img", UUID, job_dir=tmp_path, cpu_only=True)
    assert container_spec("img", None, job_dir=tmp_path, cpu_only=True)["device_requests"] == []


def test_root_user_refused(tmp_path):
    with pytest.raises(ConfigError, match="root"):
        container_spec("img", UUID, job_dir=tmp_path, user="0:0")


class FakeContainer:
    def __init__(self, out: bytes, err: bytes = b""):
        self.out, self.err, self.removed = out, err, False

    def wait(self, timeout=None):
        return {"StatusCode": 0}

    def logs(self, stdout=True, stderr=True):
        return self.out if stdout else self.err

    def kill(self):
        pass

    def remove(self, force=False):
        self.removed = True


class FakeClient:
    def __init__(self, container):
        self.container = container
        self.containers = self
        self.kwargs = None

    def run(self, **kw):
        self.kwargs = kw
        job = Path(next(iter(kw["volumes"]))) / "job.json"
        self.job = job.read_text()
        return self.container


def test_run_in_container_parses_the_result_and_removes_the_container():
    c = FakeContainer(b'noise\nKERNELRL_RESULT {"executable": true, "correct": true, "speedup": 1.7, "flags": []}\n')
    client = FakeClient(c)
    res = run_in_container("img", UUID, "class Model: ...", "class ModelNew: ...", {"max_wall_s": 60},
                           client=client)
    assert res["speedup"] == 1.7 and res["sandbox"]["docker"]["gpu_uuid"] == UUID
    assert c.removed and "ModelNew" in client.job and client.kwargs["network_mode"] == "none"
    assert json.loads(client.job)["eager_estimate"] is True  # the container runs evaluate(eager_estimate=...)
    client = FakeClient(FakeContainer(c.out))
    run_in_container("img", UUID, "t", "c", {}, client=client, eager_estimate=False)  # a reward job's
    assert json.loads(client.job)["eager_estimate"] is False
    assert not Path(next(iter(client.kwargs["volumes"]))).exists()  # the job dir is cleaned up
    with pytest.raises(RuntimeError, match="without a result"):
        run_in_container("img", UUID, "t", "c", {}, client=FakeClient(FakeContainer(b"", b"boom")))


def test_evaluator_dockerfile_shape():
    text = (ROOT / "containers" / "evaluator.Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04"
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.M)
    assert re.search(r"torch==[0-9.]+", (ROOT / "containers" / "requirements-evaluator.txt").read_text())
    assert "latest" not in text and "--no-install-recommends" in text and "rm -rf /var/lib/apt/lists" in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert users[-1].split(":")[0] == container_spec("i", UUID, job_dir="/tmp")["user"].split(":")[0]
    assert re.search(r'^ENTRYPOINT \["kernelrl", "worker"\]', text, re.M)
    for src in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", text, re.M):
        for p in src.split():
            assert (ROOT / p).exists(), p


def _engine_and_base():
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:
        pytest.skip(f"no Docker engine ({e}); set DOCKER_HOST")
    base = os.environ.get("KERNELRL_TEST_EVAL_BASE", "kernelrl/cpu-step:latest")
    try:
        client.images.get(base)
    except Exception:
        pytest.skip(f"no local image {base} with torch and kernelrl's dependencies (KERNELRL_TEST_EVAL_BASE)")
    return client, base


@pytest.mark.docker
def test_real_engine_evaluates_in_a_throwaway_container(tmp_path):
    """On a real engine (CPU only: no GPU here): an image with this checkout's kernelrl on top of a local base,
    one seed evaluated by run_in_container with the spec's restrictions; the container is gone afterwards."""
    import io
    import tarfile

    from kernelrl.tasks import get_task, load_seeds

    client, base = _engine_and_base()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        df = f"FROM {base}\nUSER 0\nCOPY kernelrl /opt/kernelrl/kernelrl\nRUN chmod -R a+rX /opt/kernelrl\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(df)
        tar.addfile(info, io.BytesIO(df))
        tar.add(ROOT / "kernelrl", arcname="kernelrl", filter=lambda ti: None if "__pycache__" in ti.name else ti)
    buf.seek(0)
    image, _ = client.images.build(fileobj=buf, custom_context=True, tag="kernelrl/evaluator-test:dev", rm=True,
                                   network_mode="none")
    task = get_task("09_Swish")
    seed = next(s for s in load_seeds(task) if s.device == "any" and s.expect == "faster")
    settings = {"device": "cpu", "budget_s": 0.2, "correctness_trials": 2, "min_rounds": 7, "max_wall_s": 240}
    before = {c.id for c in client.containers.list(all=True)}
    res = run_in_container("kernelrl/evaluator-test:dev", None, task.source, seed.source, settings, client=client,
                           cpu_only=True, mem_limit="4g", tmpfs_size="2g")
    assert res["executable"] and res["correct"], res.get("error")
    assert res["sandbox"]["docker"]["network"] == "none" and res["timing"]["rounds"] >= 7
    assert {c.id for c in client.containers.list(all=True)} == before  # thrown away
