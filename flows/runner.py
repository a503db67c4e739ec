"""Step runners: launch one pipeline step (``python -m steps.<stage> ...``) and hand back its manifest.

    from flows.runner import LocalProcessRunner, DockerRunner, StepFailed

    runner = LocalProcessRunner()                     # the embedded default: a child process per step
    manifest = runner.run("sft", "smoke", "smoke", {"sft.epochs": "1"}, Path("out/sft.manifest.json"))

    runner = DockerRunner(images={"trainer": "kernelrl/trainer:latest"})
    runner.container_spec("sft", "smoke", "smoke", {}, Path("out/sft.manifest.json"))  # docker-py kwargs

A runner implements ``StepRunner.run(stage, run_name, recipe, overrides, manifest_out) -> manifest`` and
raises ``StepFailed(retryable=...)``: exit status 2 is a user error (bad recipe, missing upstream; retrying
cannot help, ``retryable=False``); any other non-zero status, a signal, a timeout or a missing manifest is
``retryable=True`` and the flow's task retries it with backoff.

Output conventions a step may use on stdout (one per line; everything else is logged as is):

* ``KERNELRL_MANIFEST {json}`` - the manifest, last line (``steps.common.write_manifest`` prints it).
* ``KERNELRL_PROGRESS <fraction> [message]`` - progress of a long stage, ``fraction`` in [0, 1]
  (e.g. ``KERNELRL_PROGRESS 0.25 step 2/8``). The flow turns these into a Prefect progress artifact;
  ``steps.common`` does not print them yet - a step prints them itself (``print(..., flush=True)``).

What reaches where: every line of a step goes to its log file (``log_file``; the flow passes
``<home>/runs/<run>/logs/<stage>.log``) and to the Prefect run logger (the UI keeps the whole output). The
``kernelrl.console`` logger gets only what a person watching a run needs: progress lines and the step's own
warnings and errors (``kernelrl pipeline run`` prints that logger and quiets Prefect's console handler).

The environment a step sees is an allow-list (``step_env``): ``KERNELRL_*`` settings, PATH/HOME/locale,
offline Hugging Face switches, thread counts, ``VLLM_*``/``NCCL_*`` tuning. A variable whose name looks like a
secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``) passes only to the stages listed for it in
``STAGE_SECRETS`` (the LLM API key to augment, S3 keys to stages that use checkpoints). Nothing else leaks
(no ``PREFECT_API_KEY``, no cloud credentials of the orchestrator).

Containers (``DockerRunner``) always use ``network_mode="host"``: these machines flag traffic to private
ranges, and Docker's default bridge is one (172.17.0.0/16); host networking also lets a step reach the store
and MinIO on 127.0.0.1. GPUs are pinned by UUID (``DeviceRequest(device_ids=["GPU-..."])``).

Kubernetes is not built here: run the per-stage flows as deployments on a Prefect ``kubernetes`` work pool
(see infra/README.md) and each flow run becomes a Job; inside it use ``LocalProcessRunner``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

MANIFEST_MARKER = "KERNELRL_MANIFEST "
CONSOLE = logging.getLogger("kernelrl.console")  # the short per-stage lines a person follows a run by
# A step's own warnings and errors (its logging format is "<time> <stage> LEVEL message"; one-line user errors
# start with "error:"); library chatter (FutureWarning and friends) stays in the log file.
_NOTABLE = re.compile(r"^\S+ \S+ \S+ (WARNING|ERROR|CRITICAL) |^error: ")
PROGRESS_MARKER = "KERNELRL_PROGRESS "
REPO_ROOT = Path(__file__).resolve().parents[1]

ProgressFn = Callable[[float, str], None]

# Variables passed by exact name. Why each: PATH/HOME/locale for any process; HF/transformers offline
# switches and cache locations so a step never downloads unexpectedly; thread counts (2 busy cores here:
# threads fight); CA bundles for S3/HTTPS endpoints with private CAs; CUDA_VISIBLE_DEVICES for local GPU
# pinning.
PASS_NAMES = frozenset({
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "VIRTUAL_ENV",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "TOKENIZERS_PARALLELISM",
    "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE", "TORCH_HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
})
# Variables passed by prefix: kernelrl's own settings, and engine tuning knobs (vLLM, NCCL).
PASS_PREFIXES = ("KERNELRL_", "VLLM_", "NCCL_")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Secret-looking variables and the stages that need them; everything else secret-looking is dropped.
_S3_STAGES = frozenset({"augment", "sft", "selfsup", "crl", "bench"})  # any stage may read/write checkpoints
STAGE_SECRETS: dict[str, frozenset[str]] = {
    "KERNELRL_LLM_API_KEY": frozenset({"augment"}),  # teacher LLMs (paid API): augmentation only
    "KERNELRL_S3_ACCESS_KEY_ID": _S3_STAGES,
    "KERNELRL_S3_SECRET_ACCESS_KEY": _S3_STAGES,
}


class StepFailed(Exception):
    """A step did not produce a manifest. ``retryable`` says whether running it again can help."""

    def __init__(self, stage: str, message: str, *, retryable: bool, exit_code: int | None = None):
        super().__init__(f"step {stage}: {message}")
        self.stage = stage
        self.retryable = retryable
        self.exit_code = exit_code

    def __reduce__(self):  # picklable with its keywords (Prefect persists and ships exceptions)
        return (_rebuild_step_failed, (self.stage, str(self), self.retryable, self.exit_code))


def _rebuild_step_failed(stage: str, text: str, retryable: bool, exit_code: int | None) -> StepFailed:
    e = StepFailed(stage, "", retryable=retryable, exit_code=exit_code)
    e.args = (text,)
    return e


class StepRunner(Protocol):
    def run(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
            manifest_out: Path, *, on_progress: ProgressFn | None = None,
            log_file: Path | None = None) -> dict[str, Any]:
        """Run one step to completion; return its manifest or raise ``StepFailed``. Every output line is
        appended to ``log_file`` when given."""
        ...


# -- shared pieces -------------------------------------------------------------------------------------------
def step_args(stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
              manifest_out: str | os.PathLike) -> list[str]:
    """The step's own arguments (after ``python -m <prefix>.<stage>``)."""
    args = ["--recipe", str(recipe), "--run", run_name, "--manifest-out", os.fspath(manifest_out)]
    for key, value in (overrides or {}).items():
        args += ["--set", f"{key}={_override_text(value)}"]
    return args


def _override_text(value: Any) -> str:
    """``--set`` values are YAML: strings pass through as typed on the command line; others are dumped."""
    if isinstance(value, str):
        return value
    return json.dumps(value)  # JSON is YAML: lists, dicts, numbers, true/false round-trip


def step_env(stage: str, environ: Mapping[str, str] | None = None, *, extra: Mapping[str, str] | None = None,
             secrets: Mapping[str, Iterable[str]] | None = None) -> dict[str, str]:
    """The allow-listed environment for a step of ``stage`` (see the module docstring)."""
    environ = os.environ if environ is None else environ
    secrets = STAGE_SECRETS if secrets is None else secrets
    env: dict[str, str] = {}
    for name, value in environ.items():
        if not (name in PASS_NAMES or name.startswith(PASS_PREFIXES)):
            continue
        if _SECRET_NAME.search(name) and stage not in set(secrets.get(name, ())):
            continue
        env[name] = value
    env["PYTHONUNBUFFERED"] = "1"  # lines reach the flow's log as they are printed
    env.update(extra or {})
    return env


def _stage_logger(stage: str) -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger when called inside a flow or task run, else ``kernelrl.steps.<stage>``."""
    try:
        from prefect.context import FlowRunContext, TaskRunContext
        from prefect.logging import get_run_logger

        if TaskRunContext.get() or FlowRunContext.get():
            return get_run_logger()
    except Exception:  # prefect missing or no run context
        pass
    return logging.getLogger(f"kernelrl.steps.{stage}")


class _Output:
    """Consumes a step's output lines: logs them, captures the manifest, parses progress, keeps a tail."""

    def __init__(self, stage: str, logger, on_progress: ProgressFn | None, tail: int = 30,
                 log_file: Path | None = None, header: str = ""):
        self.stage = stage
        self.logger = logger
        self.on_progress = on_progress
        self.manifest_line: dict[str, Any] | None = None
        self.tail: deque[str] = deque(maxlen=tail)
        self.log_file = Path(log_file) if log_file else None
        self._fh = None
        if self.log_file is not None:
            try:
                self.log_file.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.log_file, "a", buffering=1, errors="replace")
                self._fh.write(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} {header}\n")
            except OSError as e:  # a full or read-only disk must not fail the step: the UI still has the lines
                self.logger.warning("%s | cannot write the log file %s: %s", stage, self.log_file, e)
                self._fh = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def line(self, text: str, stream: str = "out") -> None:
        text = text.rstrip("\r\n")
        if self._fh is not None:
            try:
                self._fh.write(("! " if stream == "err" else "") + text + "\n")
            except OSError:
                self._fh = None
        if text.startswith(MANIFEST_MARKER):
            try:
                self.manifest_line = json.loads(text[len(MANIFEST_MARKER):])
            except ValueError:
                self.logger.warning("%s: unparsable manifest line", self.stage)
            self.logger.info("%s | manifest received", self.stage)
            return
        if text.startswith(PROGRESS_MARKER):
            parts = text[len(PROGRESS_MARKER):].strip().split(None, 1)
            try:
                frac = min(max(float(parts[0]), 0.0), 1.0)
            except (ValueError, IndexError):
                self.logger.warning("%s | bad progress line: %s", self.stage, text)
                return
            msg = parts[1] if len(parts) > 1 else ""
            self.logger.info("%s | progress %.0f%% %s", self.stage, frac * 100, msg)
            CONSOLE.info("%-8s %3.0f%% %s", self.stage, frac * 100, msg)
            if self.on_progress is not None:
                try:
                    self.on_progress(frac, msg)
                except Exception as e:  # a UI artifact must never fail the step
                    self.logger.warning("%s | progress callback failed: %s", self.stage, e)
            return
        self.tail.append(text)
        self.logger.info("%s%s %s", self.stage, " !" if stream == "err" else " |", text)
        if _NOTABLE.search(text):
            CONSOLE.warning("%-8s ! %s", self.stage, text)

    def error_hint(self) -> str:
        """The most telling recent line (a step's one-line ``error: ...``), else the last line."""
        for t in reversed(self.tail):
            if t.startswith("error:") or "Error" in t:
                return t.strip()[:500]
        return self.tail[-1].strip()[:500] if self.tail else ""


def check_manifest(stage: str, run_name: str, path: Path | None, from_stdout: dict[str, Any] | None,
                   logger) -> dict[str, Any]:
    """The manifest of a step that exited 0: the file (written atomically), else the stdout line."""
    manifest = None
    if path is not None and path.exists():
        try:
            manifest = json.loads(path.read_text())
        except ValueError as e:
            raise StepFailed(stage, f"manifest {path} is not valid JSON ({e})", retryable=True) from None
    elif from_stdout is not None:
        logger.warning("%s: manifest file %s missing; using the manifest printed on stdout", stage, path)
        manifest = from_stdout
    if not isinstance(manifest, dict):
        raise StepFailed(stage, "exited 0 without writing a manifest", retryable=True, exit_code=0)
    if manifest.get("stage") != stage or manifest.get("run") != run_name:
        raise StepFailed(stage, f"manifest is for stage {manifest.get('stage')!r} of run {manifest.get('run')!r}, "
                         f"expected {stage!r} of {run_name!r}", retryable=False, exit_code=0)
    if manifest.get("status", "done") != "done":
        raise StepFailed(stage, f"manifest status is {manifest.get('status')!r}", retryable=True, exit_code=0)
    return manifest


def exit_failure(stage: str, code: int, hint: str) -> StepFailed:
    """Map an exit status to StepFailed: 2 = user error (not retried), anything else retryable."""
    tail = f": {hint}" if hint else ""
    if code == 2:
        return StepFailed(stage, f"user error (exit 2){tail}", retryable=False, exit_code=code)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return StepFailed(stage, f"killed by signal {name}{tail}", retryable=True, exit_code=code)
    if code >= 128 and code - 128 in {s.value for s in signal.Signals}:  # containers report 128+signal
        return StepFailed(stage, f"exit {code} (signal {signal.Signals(code - 128).name}){tail}", retryable=True,
                          exit_code=code)
    return StepFailed(stage, f"exit {code}{tail}", retryable=True, exit_code=code)


# -- local processes ------------------------------------------------------------------------------------------
@dataclass
class LocalProcessRunner:
    """Each step as a child process: ``<python> -m <module_prefix>.<stage> ...`` in the caller's directory.

    ``module_prefix`` lets tests point the same runner at ``tests.fake_steps``. ``timeout_s`` kills a step that
    runs too long (retryable). ``environ`` is the environment the allow-list is taken from (default: ours).
    """

    module_prefix: str = "steps"
    python: str = field(default_factory=lambda: sys.executable)
    cwd: Path | None = None  # None: the caller's directory, so relative recipe paths, .env and home agree
    timeout_s: float | None = None
    environ: Mapping[str, str] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    kill_grace_s: float = 10.0  # SIGTERM first so a trainer can save; SIGKILL after this many seconds

    def command(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
                manifest_out: Path) -> list[str]:
        return [self.python, "-m", f"{self.module_prefix}.{stage}",
                *step_args(stage, run_name, recipe, overrides, manifest_out)]

    def env(self, stage: str) -> dict[str, str]:
        env = step_env(stage, self.environ, extra=self.extra_env)
        # The step imports `steps`/`kernelrl` from the repository whatever the working directory.
        pp = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
        return env

    def run(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
            manifest_out: Path, *, on_progress: ProgressFn | None = None,
            log_file: Path | None = None) -> dict[str, Any]:
        logger = _stage_logger(stage)
        manifest_out = Path(manifest_out).resolve()
        manifest_out.parent.mkdir(parents=True, exist_ok=True)
        manifest_out.unlink(missing_ok=True)  # never mistake an old manifest for this attempt's
        cmd = self.command(stage, run_name, recipe, overrides, manifest_out)
        logger.info("%s | starting: %s", stage, " ".join(cmd[1:]))
        out = _Output(stage, logger, on_progress, log_file=log_file, header=" ".join(cmd[1:]))
        try:
            return self._run(stage, run_name, cmd, manifest_out, out, logger)
        except StepFailed as e:
            raise _with_log(e, log_file) from None
        finally:
            out.close()

    def _run(self, stage: str, run_name: str, cmd: list[str], manifest_out: Path, out: _Output, logger
             ) -> dict[str, Any]:
        try:
            proc = subprocess.Popen(cmd, cwd=self.cwd or Path.cwd(), env=self.env(stage), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                    errors="replace", start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as e:
            raise StepFailed(stage, f"cannot start {cmd[0]}: {e}", retryable=False) from None
        lines: queue.Queue[tuple[str, str | None]] = queue.Queue()

        def pump(stream, name: str) -> None:
            try:
                for line in stream:
                    lines.put((name, line))
            finally:
                lines.put((name, None))

        readers = [threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
        for t in readers:
            t.start()
        deadline = time.monotonic() + self.timeout_s if self.timeout_s else None
        open_streams, timed_out = 2, False
        try:
            while open_streams:
                try:
                    name, line = lines.get(timeout=0.5)
                except queue.Empty:
                    if deadline is not None and time.monotonic() > deadline:
                        timed_out = True
                        self._stop(proc)
                        deadline = None
                    continue
                if line is None:
                    open_streams -= 1
                else:
                    out.line(line, name)
            code = proc.wait()
        finally:
            if proc.poll() is None:  # cancelled or crashed while streaming: do not leave the step behind
                self._stop(proc)
        if timed_out:
            raise StepFailed(stage, f"timed out after {self.timeout_s:g} s", retryable=True, exit_code=code)
        if code != 0:
            raise exit_failure(stage, code, out.error_hint())
        return check_manifest(stage, run_name, manifest_out, out.manifest_line, logger)

    def _stop(self, proc: subprocess.Popen) -> None:
        """SIGTERM the step's process group, then SIGKILL after ``kill_grace_s``."""
        for sig, wait in ((signal.SIGTERM, self.kill_grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def _with_log(e: StepFailed, log_file: Path | None) -> StepFailed:
    """The failure with where its whole output is (the message carries only the most telling line)."""
    if log_file is not None and "full log:" not in str(e):
        e.args = (f"{e} (full log: {log_file})",)
    return e


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM the step when the runner's thread dies (a SIGKILLed flow run must not
    leave a trainer holding GPUs). Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# -- Docker containers ----------------------------------------------------------------------------------------
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
            ids = list(roles.get(STAGE_GPU_ROLE.get(stage, ""), []) or [])
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
            raise _with_log(e, log_file) from None

    def _run(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
             manifest_out: Path, on_progress: ProgressFn | None, log_file: Path | None) -> dict[str, Any]:
        from kernelrl.config.recipes import load_recipe
        from kernelrl.config.settings import load_settings

        logger = _stage_logger(stage)
        settings = load_settings()
        recipe_obj = load_recipe(recipe, parse_overrides(overrides))
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
        out = _Output(stage, logger, on_progress, log_file=log_file, header=f"container {spec['name']}")
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


def settings_env(settings) -> dict[str, str]:
    """``KERNELRL_*`` variables for every set value of a Settings object (secrets included: filter them)."""
    out: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None or value == []:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        elif isinstance(value, Path):
            value = str(value.resolve())
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        out[f"KERNELRL_{name.upper()}"] = str(value)
    return out


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


def parse_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``--set`` values as the step will read them (YAML scalars: ``1`` -> int, ``[1,2]`` -> list)."""
    import yaml

    out = {}
    for k, v in (overrides or {}).items():
        out[k] = yaml.safe_load(v) if isinstance(v, str) else v
    return out


def make_runner(kind: str = "local", *, module_prefix: str = "steps", **options: Any) -> StepRunner:
    """A runner by name: ``local`` (default) or ``docker``; ``options`` go to its constructor."""
    if kind == "local":
        return LocalProcessRunner(module_prefix=module_prefix, **options)
    if kind == "docker":
        return DockerRunner(module_prefix=module_prefix, **options)
    from kernelrl.errors import ConfigError

    raise ConfigError(f"runner {kind!r}: expected local or docker")
