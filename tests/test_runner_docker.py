"""The Docker step runner without an engine: the container spec it asks docker-py for, and its run loop
against a stand-in client. The real engine is exercised by the `docker`-marked suite (issue 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from docker.types import DeviceRequest

from flows.runner import DockerRunner, StepFailed, augment_uses_vllm, resolve_gpu_uuids
from kernelrl.config.recipes import load_recipe
from kernelrl.config.settings import load_settings

UUIDS = {str(i): f"GPU-{i:08d}-aaaa-bbbb-cccc-{i:012d}" for i in range(8)}


def lookup():
    return dict(UUIDS)


@pytest.fixture
def env(monkeypatch, tmp_path):
    home = tmp_path / "home"
    monkeypatch.setenv("KERNELRL_HOME", str(home))
    monkeypatch.delenv("KERNELRL_STORE_URL", raising=False)
    monkeypatch.delenv("KERNELRL_CHECKPOINT_URI", raising=False)
    monkeypatch.setenv("KERNELRL_LLM_API_KEY", "sk-teacher")
    monkeypatch.setenv("KERNELRL_S3_ACCESS_KEY_ID", "AKIA-test")
    monkeypatch.setenv("KERNELRL_S3_SECRET_ACCESS_KEY", "s3-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak")
    monkeypatch.setenv("PREFECT_API_KEY", "leak")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    monkeypatch.setenv("GITHUB_TOKEN", "leak")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    return home


def spec_for(stage, recipe="h100x8", runner=None, **kw):
    runner = runner or DockerRunner(gpu_lookup=lookup)
    recipe_obj = load_recipe(recipe)
    return runner.container_spec(stage, "r1", recipe, {"crl.steps": "5"}, Path("/tmp/out") / f"{stage}.json",
                                 recipe_obj=recipe_obj, settings=load_settings(), **kw)


def test_spec_host_network_gpu_uuids_labels(env):
    spec = spec_for("sft", labels={"org.prefect.flow-run-id": "fr-1"})
    assert spec["network_mode"] == "host"
    assert "networks" not in spec and "network" not in spec and "ports" not in spec
    assert spec["image"] == "kernelrl/trainer:latest"
    [req] = spec["device_requests"]
    assert isinstance(req, DeviceRequest)
    assert req["DeviceIDs"] == [UUIDS[str(i)] for i in range(6)]  # h100x8: train role = GPUs 0-5, by UUID
    assert req["Capabilities"] == [["gpu"]] and not req.get("Count")
    assert spec["labels"] == {"kernelrl.run": "r1", "kernelrl.stage": "sft", "kernelrl.recipe": "h100x8",
                              "kernelrl.managed-by": "kernelrl-flows", "org.prefect.flow-run-id": "fr-1"}
    assert spec["command"] == ["python", "-m", "steps.sft", "--recipe", "h100x8", "--run", "r1",
                               "--manifest-out", "/kernelrl/out/sft.json", "--set", "crl.steps=5"]
    assert spec["entrypoint"] == []  # the image's own entrypoint (the evaluator's `kernelrl worker`) cleared
    assert spec["detach"] is True and spec["init"] is True
    assert spec["name"].startswith("kernelrl-r1-sft-")
    assert spec["shm_size"] and spec["working_dir"] == "/opt/kernelrl"


def test_spec_env_is_an_allow_list_without_unneeded_secrets(env):
    for stage in ("sft", "selfsup", "crl", "bench"):
        e = spec_for(stage)["environment"]
        assert "KERNELRL_LLM_API_KEY" not in e, stage  # only augment talks to teacher APIs
        assert e["KERNELRL_S3_SECRET_ACCESS_KEY"] == "s3-secret"  # checkpoints
        assert "leak" not in e.values()
        assert not any(k.startswith("PREFECT_") for k in e)
        assert "CUDA_VISIBLE_DEVICES" not in e  # the device request decides; inside, GPUs are 0..n-1
        assert "PATH" not in e and "VIRTUAL_ENV" not in e  # the image's own
        assert e["HOME"] == "/tmp" and e["KERNELRL_HOME"] == str(env.resolve())
        assert e["PYTHONUNBUFFERED"] == "1"
    aug = spec_for("augment")["environment"]
    assert aug["KERNELRL_LLM_API_KEY"] == "sk-teacher"


def test_spec_volumes_for_local_state(env, tmp_path, monkeypatch):
    ck = tmp_path / "ckpts"
    monkeypatch.setenv("KERNELRL_CHECKPOINT_URI", str(ck))
    spec = spec_for("crl")
    home = str(env.resolve())
    assert spec["volumes"]["/tmp/out"] == {"bind": "/kernelrl/out", "mode": "rw"}  # manifest comes back here
    assert spec["volumes"][home] == {"bind": home, "mode": "rw"}  # SQLite store, resumable work dirs
    assert spec["volumes"][str(ck.resolve())] == {"bind": str(ck.resolve()), "mode": "rw"}
    assert spec["environment"]["KERNELRL_CHECKPOINT_URI"] == str(ck.resolve())
    # S3 checkpoints: nothing to mount
    monkeypatch.setenv("KERNELRL_CHECKPOINT_URI", "s3://bucket/prefix")
    spec = spec_for("crl")
    assert set(spec["volumes"]) == {"/tmp/out", home}
    assert spec["environment"]["KERNELRL_CHECKPOINT_URI"] == "s3://bucket/prefix"


def test_images_and_gpus_per_stage(env):
    assert spec_for("bench")["image"] == "kernelrl/evaluator:latest"
    assert spec_for("bench")["device_requests"][0]["DeviceIDs"] == [UUIDS["7"]]  # evaluate role
    assert spec_for("augment")["image"] == "kernelrl/trainer:latest"  # h100x8 teachers are HTTP APIs
    local_teacher = load_recipe("smoke", {"augment.teachers": ["/models/teacher"]})
    assert augment_uses_vllm(local_teacher) and not augment_uses_vllm(load_recipe("h100x8"))
    r = DockerRunner(gpu_lookup=lookup)
    spec = r.container_spec("augment", "r1", "smoke", {}, Path("/tmp/out/a.json"), recipe_obj=local_teacher,
                            settings=load_settings())
    assert spec["image"] == "kernelrl/generator:latest"
    # smoke evaluates on CPU and names no GPUs: no device request at all
    assert "device_requests" not in spec_for("sft", recipe="smoke")
    # explicit pinning and image overrides win
    r = DockerRunner(gpu_lookup=lookup, gpus={"crl": ["GPU-explicit"]}, images={"trainer": "reg/t:1", "bench": "b:2"})
    assert spec_for("crl", runner=r)["device_requests"][0]["DeviceIDs"] == ["GPU-explicit"]
    assert spec_for("crl", runner=r)["image"] == "reg/t:1" and spec_for("bench", runner=r)["image"] == "b:2"


def test_resolve_gpu_uuids():
    assert resolve_gpu_uuids([0, "GPU-x", "2"], lookup) == [UUIDS["0"], "GPU-x", UUIDS["2"]]
    assert resolve_gpu_uuids(["1"], lambda: {}) == ["1"]  # no nvidia-smi here: indices kept


class FakeContainer:
    def __init__(self, chunks, code, on_wait=None):
        self.chunks, self.code, self.on_wait, self.removed = chunks, code, on_wait, False

    def logs(self, stream, follow):
        assert stream and follow
        yield from self.chunks

    def wait(self):
        if self.on_wait:
            self.on_wait()
        return {"StatusCode": self.code}

    def remove(self, force):
        self.removed = force


class FakeClient:
    """Stands in for docker.DockerClient: records the spec, plays back log chunks and an exit code."""

    def __init__(self, container):
        self.container, self.specs = container, []
        self.containers = self

    def run(self, **spec):
        self.specs.append(spec)
        return self.container


def test_run_streams_logs_checks_manifest_and_removes(env, tmp_path, caplog):
    out = tmp_path / "out" / "sft.json"
    manifest = {"stage": "sft", "run": "r1", "status": "done", "outputs": {}, "metrics": {}}
    line = "KERNELRL_MANIFEST " + json.dumps(manifest)
    # chunks split mid-line, as a log stream does
    c = FakeContainer([b"hello fr", b"om the step\nKERNELRL_PROGRESS 0.5 half\n", line.encode() + b"\n"], 0,
                      on_wait=lambda: out.write_text(json.dumps(manifest)))
    client = FakeClient(c)
    seen = []
    with caplog.at_level("INFO"):
        got = DockerRunner(client=client, gpu_lookup=lookup).run("sft", "r1", "smoke", {}, out,
                                                                  on_progress=lambda f, m: seen.append((f, m)))
    assert got == manifest and c.removed
    assert seen == [(0.5, "half")]
    assert "hello from the step" in caplog.text
    assert client.specs[0]["network_mode"] == "host"


@pytest.mark.parametrize("code,retryable", [(2, False), (1, True), (137, True)])
def test_run_failures(env, tmp_path, code, retryable):
    c = FakeContainer([b"error: something\n"], code)
    with pytest.raises(StepFailed) as e:
        DockerRunner(client=FakeClient(c), gpu_lookup=lookup).run("sft", "r1", "smoke", {}, tmp_path / "m.json")
    assert e.value.retryable is retryable and e.value.exit_code == code and c.removed


def test_spec_mounts_a_recipe_file(env, tmp_path):
    import shutil

    f = tmp_path / "recipes" / "mine.yaml"
    f.parent.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "recipes" / "smoke.yaml", f)
    spec = DockerRunner(gpu_lookup=lookup).container_spec("sft", "r1", str(f), {}, Path("/tmp/out/s.json"),
                                                          recipe_obj=load_recipe(str(f)), settings=load_settings())
    assert spec["volumes"][str(f.parent)] == {"bind": "/kernelrl/recipe", "mode": "ro"}
    assert spec["command"][3:5] == ["--recipe", "/kernelrl/recipe/mine.yaml"]


def test_spec_carries_settings_from_a_dotenv_file(env, tmp_path, monkeypatch):
    """Settings the orchestrator read from .env (not its environment) reach the container, secrets filtered."""
    monkeypatch.delenv("KERNELRL_LLM_API_KEY")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("KERNELRL_STORE_URL=postgresql://k:pw@127.0.0.1:5432/k\n"
                                   "KERNELRL_LLM_API_KEY=sk-dotenv\n")
    sft = spec_for("sft")["environment"]
    assert sft["KERNELRL_STORE_URL"] == "postgresql+psycopg2://k:pw@127.0.0.1:5432/k"
    assert "KERNELRL_LLM_API_KEY" not in sft
    assert spec_for("augment")["environment"]["KERNELRL_LLM_API_KEY"] == "sk-dotenv"
