"""One evaluation in a throw-away container (``kernelrl worker --sandbox docker --image IMAGE``).

    from kernelrl.evaluation.docker_sandbox import container_spec, run_in_container
    spec = container_spec("kernelrl/evaluator:dev", "GPU-8f6c...", job_dir="/tmp/job")   # containers.run kwargs
    result = run_in_container("kernelrl/evaluator:dev", "GPU-8f6c...", task_src, cand_src, settings_dict)

    # inside the container (the spec's entrypoint):
    python -m kernelrl.evaluation.docker_sandbox /job/job.json   # prints "KERNELRL_RESULT {json}" last

The container (docker-py ``containers.run`` kwargs from ``container_spec``) has no network
(``network_mode='none'``), a read-only root, a writable tmpfs at /tmp that allows executables (load_inline
builds and loads .so files there), every capability dropped, ``no-new-privileges``, pids/memory limits (no
swap), core dumps off, a non-root user, an init that reaps orphans, and exactly one GPU, requested by UUID.
Its environment is an allow-list of harmless variables, never the host's: no store URL, S3 keys or tokens.
The job (task source, candidate source, settings) is bind-mounted read-only at /job; an optional compile
cache directory at /cache (shared between containers: faster, but a candidate could leave files there for a
later one; off by default). Inside, the evaluator still runs the candidate in its own sandboxed process,
apart from the trusted clock. The evaluator and candidate share a uid there (dropping to another uid needs
capabilities the container does not get): set ``kernel.yama.ptrace_scope >= 1`` on the host so a candidate
cannot trace its parent.

Tests check the spec without a Docker engine (tests/test_docker_spec.py); ``run_in_container`` needs one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

RESULT_PREFIX = "KERNELRL_RESULT "
CONTAINER_USER = "10001:10001"  # the image's non-root `evaluator` user (containers/evaluator.Dockerfile)
# Variables a container may see; values are set here, never copied from the host environment.
SAFE_ENV_KEYS = ("HOME", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCH_CUDA_ARCH_LIST",
                 "NVIDIA_DRIVER_CAPABILITIES", "KERNELRL_HOME", "HF_HUB_OFFLINE", "DO_NOT_TRACK")


def container_env(*, threads: int = 1, cache_in_tmp: bool = True, cuda_arch_list: str | None = None) -> dict[str, str]:
    cache = "/tmp/kernelrl-cache" if cache_in_tmp else "/cache"
    env = {
        "HOME": "/tmp", "TMPDIR": "/tmp", "KERNELRL_HOME": "/tmp/kernelrl", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
        "TORCH_EXTENSIONS_DIR": f"{cache}/torch_extensions", "TRITON_CACHE_DIR": f"{cache}/triton",
        # compute: CUDA; utility: nvidia-smi. No graphics/video/display capabilities.
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility", "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1",
    }
    if cuda_arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = cuda_arch_list
    assert set(env) <= set(SAFE_ENV_KEYS)
    return env


def container_spec(image: str, gpu_uuid: str | None, *, job_dir: str | Path, cache_dir: str | Path | None = None,
                   mem_limit: str = "64g", pids_limit: int = 4096, tmpfs_size: str = "16g", shm_size: str = "1g",
                   threads: int = 1, cpuset_cpus: str | None = None, name: str | None = None,
                   user: str = CONTAINER_USER, cpu_only: bool = False,
                   labels: dict[str, str] | None = None) -> dict[str, Any]:
    """docker-py ``containers.run`` kwargs for one evaluation on one GPU (by UUID, 'GPU-...'); ``cpu_only``
    (with gpu_uuid None): no GPU at all, for CPU evaluations and engine tests without GPUs."""
    from kernelrl.errors import ConfigError

    if cpu_only:
        if gpu_uuid is not None:
            raise ConfigError("container_spec: cpu_only takes no GPU")
    elif not gpu_uuid or not isinstance(gpu_uuid, str) or "," in gpu_uuid or not gpu_uuid.startswith(("GPU-", "MIG-")):
        raise ConfigError(f"container_spec needs exactly one GPU UUID (GPU-...), got {gpu_uuid!r}")
    if user.split(":")[0] in ("0", "root"):
        raise ConfigError("the evaluation container must not run as root")
    try:
        from docker.types import DeviceRequest, Ulimit
    except ImportError:  # pragma: no cover - docker-py is a dependency of the evaluator image and the venv
        raise ConfigError("--sandbox docker needs the docker Python package (pip install docker)") from None
    volumes = {str(Path(job_dir).resolve()): {"bind": "/job", "mode": "ro"}}
    if cache_dir is not None:
        volumes[str(Path(cache_dir).resolve())] = {"bind": "/cache", "mode": "rw"}
    spec: dict[str, Any] = {
        "image": image,
        "entrypoint": ["python", "-m", "kernelrl.evaluation.docker_sandbox"],
        "command": ["/job/job.json"],
        "detach": True,
        "network_mode": "none",  # no network at all (not even loopback to the host)
        "read_only": True,
        # rw,exec: nvcc/ninja write objects and torch loads the built .so from here; nosuid: no setuid binaries
        "tmpfs": {"/tmp": f"rw,exec,nosuid,nodev,size={tmpfs_size}"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": pids_limit,  # fork bombs; counts threads too, so generous
        "mem_limit": mem_limit,
        "memswap_limit": mem_limit,  # equal to mem_limit: no swap
        "shm_size": shm_size,
        "ulimits": [Ulimit(name="core", soft=0, hard=0)],
        "user": user,
        "init": True,  # tini reaps orphans of the candidate
        "ipc_mode": "private",
        "device_requests": [] if cpu_only else [DeviceRequest(device_ids=[gpu_uuid], capabilities=[["gpu"]])],
        "environment": container_env(threads=threads, cache_in_tmp=cache_dir is None,
                                     cuda_arch_list=os.environ.get("TORCH_CUDA_ARCH_LIST")),
        "volumes": volumes,
        "working_dir": "/tmp",
        "labels": {"kernelrl.role": "evaluation", "kernelrl.gpu": gpu_uuid or "none", **(labels or {})},
    }
    if cpuset_cpus:
        spec["cpuset_cpus"] = cpuset_cpus
    if name:
        spec["name"] = name
    return spec


def run_in_container(image: str, gpu_uuid: str | None, task_source: str, cand_source: str, settings: dict[str, Any], *,
                     client=None, timeout_s: float | None = None, cache_dir: str | Path | None = None,
                     eager_estimate: bool = True, **spec_kw) -> dict[str, Any]:
    """Evaluate one candidate in a fresh container; returns ``EvalResult.to_dict()``. A container that runs
    past ``timeout_s`` (default: settings' max_wall_s + 120 s for start-up) is killed and scored as a timeout;
    a container that prints no result is a harness failure (RuntimeError: the job is retried). ``eager_estimate``:
    as ``evaluate``'s (the report-only eager estimate; the job worker skips it for rewards)."""
    import docker
    from requests.exceptions import ConnectionError as ReqConnectionError
    from requests.exceptions import ReadTimeout

    timeout_s = timeout_s or float(settings.get("max_wall_s", 300.0)) + 120.0
    job_dir = Path(tempfile.mkdtemp(prefix="kernelrl-docker-job-"))
    os.chmod(job_dir, 0o755)
    (job_dir / "job.json").write_text(json.dumps({"task_source": task_source, "candidate_source": cand_source,
                                                  "settings": settings, "eager_estimate": eager_estimate}))
    os.chmod(job_dir / "job.json", 0o644)
    client = client or docker.from_env()
    container = None
    try:
        container = client.containers.run(**container_spec(image, gpu_uuid, job_dir=job_dir, cache_dir=cache_dir,
                                                           **spec_kw))
        try:
            status = container.wait(timeout=timeout_s)
        except (ReadTimeout, ReqConnectionError):
            container.kill()
            return {"executable": False, "correct": False, "speedup": 0.0, "flags": ["timeout"], "success": False,
                    "error": f"the evaluation container ran past {timeout_s:.0f} s and was killed", "timing": {},
                    "sandbox": {"docker": True}}
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        lines = [ln for ln in out.splitlines() if ln.startswith(RESULT_PREFIX)]
        if not lines:
            err = container.logs(stdout=False, stderr=True).decode(errors="replace")[-1500:]
            raise RuntimeError(f"evaluation container exited {status.get('StatusCode')} without a result: {err}")
        result = json.loads(lines[-1][len(RESULT_PREFIX):])
        result.setdefault("sandbox", {})["docker"] = {"image": image, "gpu_uuid": gpu_uuid, "network": "none"}
        return result
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # pragma: no cover - already gone
                pass
        shutil.rmtree(job_dir, ignore_errors=True)


def kill_labelled(worker_id: str, client=None) -> int:
    """Kill and remove the evaluation containers a worker started (its job was released on SIGTERM)."""
    import docker

    client = client or docker.from_env()
    n = 0
    for c in client.containers.list(all=True, filters={"label": f"kernelrl.worker={worker_id}"}):
        try:
            c.remove(force=True)
            n += 1
        except Exception:  # pragma: no cover - already gone
            pass
    return n


def main(argv: list[str] | None = None) -> int:
    """Inside the container: evaluate the mounted job on the container's only GPU (or the CPU) and print it."""
    import dataclasses

    from kernelrl.config.stages import EvalConfig
    from kernelrl.evaluation import evaluate

    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0] if argv else "/job/job.json").read_text())
    names = {f.name for f in dataclasses.fields(EvalConfig)}
    cfg = EvalConfig(**{k: v for k, v in job["settings"].items() if k in names})
    import torch

    device = "cuda:0" if torch.cuda.is_available() and str(cfg.device).startswith("cuda") else "cpu"
    cfg = dataclasses.replace(cfg, device=device, reverify=False,
                              cache_dir=os.environ.get("TORCH_EXTENSIONS_DIR", "/tmp/kernelrl-cache").rsplit("/", 1)[0])
    res = evaluate(job["task_source"], job["candidate_source"], cfg, eager_estimate=job.get("eager_estimate", True))
    sys.stdout.write(RESULT_PREFIX + json.dumps(res.to_dict()) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
