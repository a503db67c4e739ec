"""The production step runner: one container per step, GPUs pinned by UUID, host networking.

    from flows.docker_runner import DockerRunner
    runner = DockerRunner(images={"trainer": "kernelrl/trainer:latest"})
    runner.container_spec("sft", "smoke", "smoke", {}, Path("out/sft.manifest.json"))  # docker-py kwargs

Containers always use ``network_mode="host"`` (these machines flag private-range traffic, and Docker's default
bridge is one; host networking also reaches the store and MinIO on 127.0.0.1).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows import interrupt
from flows.runner import (ProgressFn, StepFailed, StepOutput, check_manifest, exit_failure, stage_logger,
                          step_args, with_log_path)
from flows.stepenv import settings_env, step_env

DEFAULT_IMAGES = {
    # image roles -> tags; `make images` / compose build these from containers/
    "trainer": "kernelrl/trainer:latest",
    "generator": "kernelrl/generator:latest",
    "evaluator": "kernelrl/evaluator:latest",
}
STAGE_IMAGE_ROLE = {"augment": "trainer", "sft": "trainer", "selfsup": "trainer", "crl": "trainer",
                    "bench": "evaluator"}
# Which entry of a recipe's `gpus:` roles a stage's container gets.
STAGE_GPU_ROLE = {"augment": "generate", "sft": "train", "selfsup": "train", "crl": "train", "bench": "evaluate"}
# Host-side variables that would break a container (its PATH and venv are the image's).
_HOST_ONLY = ("PATH", "HOME", "USER", "VIRTUAL_ENV", "TMPDIR", "PYTHONPATH", "CUDA_VISIBLE_DEVICES")
CONTAINER_OUT = "/kernelrl/out"  # where the host's manifest folder is mounted inside a container
CONTAINER_RECIPES = "/kernelrl/recipe"  # where a recipe given as a file is mounted (read-only)
CONTAINER_WORKDIR = "/opt/kernelrl"  # the code's location in our images (containers/base.Dockerfile)


def augment_uses_vllm(recipe) -> bool:
    """Augmentation generates locally (vLLM, generator image) when a teacher is a local model, not an API."""
    teachers = getattr(getattr(recipe, "augment", None), "teachers", None) or []
    return any(t != "seed-corpus" and not str(t).startswith(("http://", "https://")) for t in teachers)


def nvidia_smi_uuids() -> dict[str, str]:
    """``{"0": "GPU-<uuid>", ...}`` from nvidia-smi; empty when it is not available."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = (line.split(",", 1) for line in out.splitlines() if "," in line)
    return {i.strip(): u.strip() for i, u in pairs}


def resolve_gpu_uuids(ids: Iterable[Any], lookup: Callable[[], dict[str, str]] = nvidia_smi_uuids,
                      logger=None) -> list[str]:
    """GPU ids as UUIDs: ``GPU-...`` kept, indices mapped through nvidia-smi (kept as indices if unknown)."""
    ids = [str(i).strip() for i in ids if str(i).strip()]
    if all(i.startswith(("GPU-", "MIG-")) for i in ids):
        return ids
    table = lookup()
    out = []
    for i in ids:
        if i.startswith(("GPU-", "MIG-")):
            out.append(i)
        elif i in table:
            out.append(table[i])
        else:
            if logger is not None:
                logger.warning("GPU %s: no UUID known (nvidia-smi unavailable here); pinning by index", i)
            out.append(i)
    return out


@dataclass
class DockerRunner:
    """Each step in its own container through docker-py (see the module docstring for the rules).

    ``images``: role (trainer/generator/evaluator) or stage name -> image tag. ``gpus``: stage -> GPU ids
    (indices or ``GPU-<uuid>``); without it a stage gets the recipe's ``gpus:`` role for it, else
    ``KERNELRL_GPU_IDS``, and none when the recipe evaluates on CPU. ``home``/checkpoint directories that are
    local are mounted at the same path inside, so paths in manifests mean the same thing on both sides.
    ``client`` is a docker-py client (default ``docker.from_env()``).
    """

    images: dict[str, str] = field(default_factory=dict)
    gpus: dict[str, list[str]] = field(default_factory=dict)
    module_prefix: str = "steps"
    environ: Mapping[str, str] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_volumes: dict[str, dict[str, str]] = field(default_factory=dict)
    shm_size: str = "8g"  # torch DataLoader workers and NCCL use /dev/shm; Docker's 64 MB default breaks them
    mem_limit: str | None = None
    user: str | None = field(default_factory=lambda: f"{os.getuid()}:{os.getgid()}")  # files on mounts stay ours
    timeout_s: float | None = None
    client: Any = None
    gpu_lookup: Callable[[], dict[str, str]] = nvidia_smi_uuids

    def image_for(self, stage: str, recipe_obj=None) -> str:
        images = {**DEFAULT_IMAGES, **self.images}
        if stage in images:
            return images[stage]
        role = STAGE_IMAGE_ROLE.get(stage, "trainer")
        if stage == "augment" and recipe_obj is not None and augment_uses_vllm(recipe_obj):
            role = "generator"
        return images[role]

    def gpu_ids_for(self, stage: str, recipe_obj=None, settings=None, logger=None) -> list[str]:
        if stage in self.gpus:
            ids = list(self.gpus[stage])
        else:
            roles = getattr(recipe_obj, "gpus", None) or {}
            ids = roles.get(STAGE_GPU_ROLE.get(stage, ""), []) or []
            if ids == "rest":  # evaluate: rest (kernelrl.config.gpus): the host's GPUs no other role names
                from kernelrl.config.gpus import GpuPlan

                ids = GpuPlan.from_recipe(roles, visible=len(self.gpu_lookup())).evaluate
            ids = list(ids) if isinstance(ids, list) else [ids]
            if not ids and roles == {}:
                cpu_only = getattr(getattr(recipe_obj, "eval", None), "device", "auto") == "cpu"
                ids = [] if cpu_only else list(getattr(settings, "gpu_ids", None) or [])
        return resolve_gpu_uuids(ids, self.gpu_lookup, logger) if ids else []

    def container_spec(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
                       manifest_out: Path, *, recipe_obj=None, settings=None, labels: dict[str, str] | None = None,
                       logger=None) -> dict[str, Any]:
        """The keyword arguments for ``client.containers.run`` (testable without an engine)."""
        from docker.types import DeviceRequest

        from kernelrl.config.settings import load_settings

        settings = settings or load_settings()
        manifest_out = Path(manifest_out).resolve()
        # settings a .env file gave the orchestrator reach the container too (still through the allow-list)
        source = {**settings_env(settings), **(os.environ if self.environ is None else self.environ)}
        env = step_env(stage, source, extra=self.extra_env)
        home = Path(settings.home).resolve()
        for name in _HOST_ONLY:  # the image's own PATH/venv apply inside, not the orchestrator's
            env.pop(name, None)
        env["KERNELRL_HOME"] = str(home)
        env["HOME"] = "/tmp"  # a writable HOME whatever uid the container runs as
        volumes: dict[str, dict[str, str]] = {
            str(manifest_out.parent): {"bind": CONTAINER_OUT, "mode": "rw"},
            str(home): {"bind": str(home), "mode": "rw"},  # SQLite store, work dirs (resumable state)
        }
        ckpt = settings.resolved_checkpoint_uri
        if "://" not in ckpt or ckpt.startswith("file://"):
            path = str(Path(ckpt.removeprefix("file://")).resolve())
            env["KERNELRL_CHECKPOINT_URI"] = path
            volumes.setdefault(path, {"bind": path, "mode": "rw"})
        if settings.kernelbench_dir:  # the KernelBench checkout a `kernelbench` suite reads
            kb = str(Path(settings.kernelbench_dir).resolve())
            env["KERNELRL_KERNELBENCH_DIR"] = kb
            volumes.setdefault(kb, {"bind": kb, "mode": "ro"})
        if env.get("HF_HOME"):
            volumes.setdefault(env["HF_HOME"], {"bind": env["HF_HOME"], "mode": "rw"})  # model cache
        volumes.update(self.extra_volumes)
        recipe_arg = str(recipe)
        rp = Path(recipe_arg)
        if rp.suffix in (".yaml", ".yml") and rp.is_file():  # a recipe file, not a named recipe: mount it
            volumes.setdefault(str(rp.resolve().parent), {"bind": CONTAINER_RECIPES, "mode": "ro"})
            recipe_arg = f"{CONTAINER_RECIPES}/{rp.name}"
        gpu_ids = self.gpu_ids_for(stage, recipe_obj, settings, logger)
        spec: dict[str, Any] = {
            "image": self.image_for(stage, recipe_obj),
            # the whole command as the entrypoint's argument list, with the image's own entrypoint cleared: the
            # evaluator image's is `kernelrl worker`, which would otherwise swallow `python -m steps.bench ...`
            "entrypoint": [],
            "command": ["python", "-m", f"{self.module_prefix}.{stage}",
                        *step_args(stage, run_name, recipe_arg, overrides, f"{CONTAINER_OUT}/{manifest_out.name}")],
            "name": _container_name(run_name, stage),
            "environment": env,
            "network_mode": "host",  # never a bridge network on these machines (module docstring)
            "volumes": volumes,
            "working_dir": CONTAINER_WORKDIR,
            "labels": {"kernelrl.run": run_name, "kernelrl.stage": stage, "kernelrl.recipe": str(recipe),
                       "kernelrl.managed-by": "kernelrl-flows", **(labels or {})},
            "shm_size": self.shm_size,
            "init": True,  # tini as PID 1: signals reach python, zombies are reaped
            "security_opt": ["no-new-privileges"],
            "detach": True,
            "stdout": True,
            "stderr": True,
        }
        if self.user:
            spec["user"] = self.user
        if self.mem_limit:
            spec["mem_limit"] = self.mem_limit
        if gpu_ids:
            spec["device_requests"] = [DeviceRequest(device_ids=gpu_ids, capabilities=[["gpu"]])]
            # inside, the pinned GPUs are cuda:0..n-1 (CUDA_VISIBLE_DEVICES was dropped above)
        return spec

    def run(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
            manifest_out: Path, *, on_progress: ProgressFn | None = None,
            log_file: Path | None = None) -> dict[str, Any]:
        try:
            return self._run(stage, run_name, recipe, overrides, manifest_out, on_progress, log_file)
        except StepFailed as e:
            raise with_log_path(e, log_file) from None

    def _run(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
             manifest_out: Path, on_progress: ProgressFn | None, log_file: Path | None) -> dict[str, Any]:
        from kernelrl.config.recipes import load_recipe
        from kernelrl.config.settings import load_settings
        from kernelrl.step import load_overrides

        logger = stage_logger(stage)
        settings = load_settings()
        recipe_obj = load_recipe(recipe, load_overrides(overrides))
        manifest_out = Path(manifest_out).resolve()
        manifest_out.parent.mkdir(parents=True, exist_ok=True)
        manifest_out.unlink(missing_ok=True)
        spec = self.container_spec(stage, run_name, recipe, overrides, manifest_out, recipe_obj=recipe_obj,
                                   settings=settings, labels=_prefect_labels(), logger=logger)
        client = self.client or _docker_client(stage)
        import docker.errors

        logger.info("%s | container %s from %s", stage, spec["name"], spec["image"])
        try:
            container = client.containers.run(**spec)
        except docker.errors.ImageNotFound:
            raise StepFailed(stage, f"image {spec['image']} not found: build it (containers/, `make images`)",
                             retryable=False) from None
        except docker.errors.APIError as e:
            raise StepFailed(stage, f"cannot start container: {e.explanation or e}", retryable=True) from None
        out = StepOutput(stage, logger, on_progress, log_file=log_file, header=f"container {spec['name']}")
        stop_token = interrupt.track(lambda grace_s: _stop_container(container, grace_s), stage)  # Ctrl-C
        timer = None
        timed_out = threading.Event()
        if self.timeout_s:
            def kill() -> None:
                timed_out.set()
                try:
                    container.stop(timeout=10)
                except Exception:
                    pass
            timer = threading.Timer(self.timeout_s, kill)
            timer.daemon = True
            timer.start()
        try:
            buf = ""
            for chunk in container.logs(stream=True, follow=True):
                buf += chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else str(chunk)
                *complete, buf = buf.split("\n")
                for line in complete:
                    out.line(line)
            if buf:
                out.line(buf)
            code = int(container.wait().get("StatusCode", -1))
        finally:
            interrupt.untrack(stop_token)
            out.close()
            if timer is not None:
                timer.cancel()
            try:
                container.remove(force=True)  # also kills it when we are cancelled mid-stream
            except Exception as e:
                logger.warning("%s | could not remove container %s: %s", stage, spec["name"], e)
        if timed_out.is_set():
            raise StepFailed(stage, f"timed out after {self.timeout_s:g} s", retryable=True, exit_code=code)
        if code != 0:
            raise exit_failure(stage, code, out.error_hint())
        return check_manifest(stage, run_name, manifest_out, out.manifest_line, logger)


def _stop_container(container, grace_s: float) -> None:
    """Ctrl-C of the pipeline: stop the step's container (SIGTERM, SIGKILL after ``grace_s``) and remove it."""
    try:
        container.stop(timeout=max(0, int(grace_s)))
    finally:
        container.remove(force=True)


def _docker_client(stage: str):
    import docker
    import docker.errors

    try:
        return docker.from_env()
    except docker.errors.DockerException as e:
        raise StepFailed(stage, f"no Docker engine reachable ({e}); use --runner local or start dockerd",
                         retryable=False) from None


def _container_name(run_name: str, stage: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9_.-]+", "-", f"kernelrl-{run_name}-{stage}").strip("-.")[:100]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def _prefect_labels() -> dict[str, str]:
    try:
        from prefect.context import FlowRunContext, TaskRunContext

        out = {}
        fr = FlowRunContext.get()
        if fr and fr.flow_run:
            out["org.prefect.flow-run-id"] = str(fr.flow_run.id)
        tr = TaskRunContext.get()
        if tr and tr.task_run:
            out["org.prefect.task-run-id"] = str(tr.task_run.id)
        return out
    except Exception:
        return {}
