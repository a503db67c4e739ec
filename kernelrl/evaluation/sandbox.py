"""Sandboxed worker processes: scrubbed environment, resource limits, no network, own process group.

The parent (``kernelrl.evaluation.api``) starts one reference worker and one candidate worker per
evaluation. Each runs ``python -m kernelrl.evaluation.worker`` in a private temp dir with:
- an allow-listed environment (no KERNELRL_*, AWS_*, tokens, keys or database URLs);
- its own session/process group (killed whole at the end), core dumps off, an address-space limit on CPU;
- no network where the OS allows (a new network namespace through unshare(2) when running as root);
- as root, the candidate drops to a fresh unprivileged uid of its own (no other process on the host has it), so
  it cannot signal, trace or renice the reference or another evaluation's candidate, and every process it
  ever starts (double-forked daemons included) can be found by that uid, frozen and killed;
- no_new_privs (setuid binaries cannot raise it back), RLIMIT_NPROC/NOFILE against fork and fd bombs;
- SIGSTOP/SIGCONT of all its processes, so an idle worker cannot run background load.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from kernelrl.evaluation import ipc, worker_context
from kernelrl.evaluation.ipc import Channel
from kernelrl.evaluation.mounts import apply_mount_plan, mount_plan, needed_paths

ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
             "NVIDIA_VISIBLE_DEVICES", "CC", "CXX", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NCCL_NVLS_ENABLE",
             "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TRITON_PTXAS_PATH")
CLONE_NEWNET = 0x40000000
UID_RANGE = (3_000_000, 2_000_000_000)  # fresh uids for candidates: no passwd entry, no files, no other process
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
ADDR_NO_RANDOMIZE = 0x0040000
NOFILE_LIMIT = 4096  # enough for torch, ninja and a compiler; stops fd exhaustion games
NPROC_LIMIT = 512  # processes + threads of the candidate's own uid (a compiler build needs a few dozen)

_environ_hidden = False


def hide_own_environ() -> bool:
    """Make the evaluating process non-dumpable, so a candidate that runs under the same uid (no root, hence no
    fresh uid for it: e.g. ``kernelrl worker`` as uid 10001 in the evaluator image) cannot read this process's
    ``/proc/<pid>/environ`` (the store URL with its password, S3 keys) or ``/proc/<pid>/mem``: the kernel then
    allows those files only to root. Its other costs: no core dumps and no same-uid debugger (py-spy needs root)
    for this process. The candidate's own environment is scrubbed anyway; processes further up (a shell, the
    flow) are out of our reach: run the evaluator as root (fresh uid per candidate) or with the Docker sandbox
    where that matters. Returns whether the flag is set."""
    global _environ_hidden
    if not _environ_hidden:
        try:
            _environ_hidden = _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
        except Exception:  # pragma: no cover - not Linux
            _environ_hidden = False
    return _environ_hidden


_STALE_RE = re.compile(r"^kernelrl-(?:ref|cand|eval|trial)-(\d+)-")  # scratch_dir's names: the pid is group 1
_stale_reaped = False


def scratch_dir(kind: str) -> Path:
    """A private temp dir named ``kernelrl-<kind>-<our pid>-XXXX``: the pid lets a later evaluator remove what a
    killed one left behind (``reap_stale_scratch``)."""
    reap_stale_scratch()
    return Path(tempfile.mkdtemp(prefix=f"kernelrl-{kind}-{os.getpid()}-"))


def reap_stale_scratch(tmp: str | None = None) -> list[str]:
    """Once per process: remove the scratch dirs of evaluators that are gone (an evaluator killed with SIGKILL
    cannot clean up; its workers die with it, its dirs stayed in /tmp for good). A dir counts as stale only when
    the pid in its name is not alive; a live pid (ours, another evaluator's, or a reused one) keeps it."""
    global _stale_reaped
    if _stale_reaped and tmp is None:
        return []
    _stale_reaped = True
    base = Path(tmp or tempfile.gettempdir())
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _STALE_RE.match(entry.name)
        if not m or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or psutil.pid_exists(pid):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed


def become_subreaper() -> None:
    """Orphans of our workers (double-forked daemons) re-parent to us, so we can find and kill them."""
    try:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:  # pragma: no cover
        pass


def scrubbed_env(home: Path, cache_dir: Path, threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW}
    root = str(Path(__file__).resolve().parents[2])
    env.update({
        "HOME": str(home), "TMPDIR": str(home), "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join(p for p in [root, os.environ.get("PYTHONPATH", "")] if p),
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
        "TORCH_EXTENSIONS_DIR": str(cache_dir / "torch_extensions"),
        "TRITON_CACHE_DIR": str(cache_dir / "triton"),
        # A candidate's fresh uid has no passwd entry: torch 2.11's inductor names its default cache after
        # getpass.getuser(), which then raised KeyError at `import torch._dynamo` (every torch.compile candidate
        # failed on the H200). The cache goes with the others; LOGNAME answers getuser() for any other caller.
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"), "LOGNAME": "kernelrl-worker",
        # torch.compile compiles in the candidate's own process: a pool of compile workers would be frozen with it
        # and killed as leftover processes. Set at process start because inductor reads it once, when its config is
        # first imported, which a spare worker does ahead of a torch.compile candidate (static.preimports_compiler).
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "PYTHONHASHSEED": "0", "MALLOC_ARENA_MAX": "2",
        # Keep large tensors in the heap instead of fresh mmaps: page-fault storms made identical CPU runs
        # differ 2-3x on these VMs.
        "MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
        "MALLOC_TOP_PAD_": str(256 * 1024 * 1024),
    })
    return env


def _preexec(mem_limit_mb: int | None, isolate_net: bool, uid: int | None, plan=None, stash: Path | None = None,
             cpus: set[int] | None = None):
    parent = os.getpid()

    def fn() -> None:
        # No address-space randomisation in the workers: the candidate runs arbitrary code anyway (ASLR protects
        # nothing here), and a fixed layout takes one source of process-to-process speed differences (cache and
        # hash-table aliasing of the interpreter's objects) out of launch-bound timings. Best effort: a
        # container's seccomp profile may refuse it.
        _libc.personality(ADDR_NO_RANDOMIZE)
        if cpus:
            try:
                os.sched_setaffinity(0, cpus)
            except OSError:
                pass
        if uid is not None and plan:
            apply_mount_plan(plan, stash)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if mem_limit_mb:
            lim = mem_limit_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            lim = NOFILE_LIMIT if hard == resource.RLIM_INFINITY else min(NOFILE_LIMIT, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (lim, lim))
        except (ValueError, OSError):
            pass
        if isolate_net:
            _libc.unshare(CLONE_NEWNET)  # best effort; the parent records whether it held
        if uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (NPROC_LIMIT, NPROC_LIMIT))  # counts this uid only
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary can give privileges back
        # Die with the evaluating process: a SIGKILLed step (or worker) otherwise leaves this worker behind for
        # ever, SIGSTOPped when it was frozen for the other's timing round. Set after setuid (which clears it).
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)
    return fn


def pids_of_uid(uid: int) -> list[int]:
    """Every process (thread-group leader) on the host owned by ``uid``: a candidate's fresh uid finds all it
    started, however it detached (setsid, double fork)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid and not _zombie(name):
                    out.append(int(name))
            except OSError:
                pass
    return out


def _zombie(pid: str) -> bool:
    """Dead and waiting to be reaped (by us as subreaper, or by init): nothing left to freeze or kill."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def fresh_uid() -> int:
    while True:
        uid = random.SystemRandom().randrange(*UID_RANGE)
        if not pids_of_uid(uid):
            return uid


# When root, run the candidate under a fresh unprivileged uid of its own: it cannot signal or read the reference or
# the parent, and everything it starts is found by that uid and killed.
DROP_PRIVILEGES = True


# CUDA: the reference's and the candidate's device contexts sleep in a synchronisation (CU_CTX_SCHED_BLOCKING_SYNC)
# instead of spinning. A model that syncs inside forward (.item(), .tolist()) waits out the held clock's hold in that
# sync, and a spinning wait is CPU time the host check charges like host work hidden behind the hold: the MoE seed
# (one .tolist() a call) scored 0.005-0.008 (30 ms a call of charge; H100, ninth session). Both sides alike; the
# holder keeps the default schedule.
BLOCKING_SYNC = True

_DROP_OK: bool | None = None


def can_drop_privileges() -> bool:
    """Root, and the interpreter, its stdlib and this package are reachable by an unprivileged uid, directly or
    through a mount plan that a trial run proved (checked once per process)."""
    global _DROP_OK
    if os.geteuid() != 0:
        return False
    if _DROP_OK is None:
        plan = mount_plan()
        _DROP_OK = plan == [] or (plan is not None and _trial_unprivileged(plan))
    return _DROP_OK


def _trial_unprivileged(plan) -> bool:
    d = scratch_dir("trial")
    try:
        uid = fresh_uid()
        for i in range(sum(len(s) for _, s in plan)):
            (d / f".m{i}").mkdir()
        code = "import os, sys; sys.exit(0 if all(os.access(p, os.R_OK | os.X_OK) for p in sys.argv[1:]) else 3)"
        p = subprocess.run([sys.executable, "-c", code, *needed_paths()], cwd=d,
                           env=scrubbed_env(d, d, 1), capture_output=True, timeout=120,
                           preexec_fn=_preexec(None, False, uid, plan, d))
        return p.returncode == 0
    except Exception:  # noqa: BLE001 - any failure means: keep the caller's uid
        return False
    finally:
        shutil.rmtree(d, ignore_errors=True)


CACHE_LOCK_WAIT_S = 600.0  # how long a candidate worker waits for its source's compile cache (compile_timeout_s)


def lock_cache(cache_dir: Path, timeout: float) -> int:
    """Take a candidate source's compile cache for one worker: an exclusive flock on a file beside it (in the
    evaluator's own directory, not in the cache the candidate's uid is given), waited for up to ``timeout`` s; the
    returned fd holds it until closed (a dead parent's lock goes with it). Then any build lock of torch's JIT left
    in the cache is stale (every build there runs under this lock) and is removed.

    Why: two workers of one source at once (the service's pre-build of a queued job beside an evaluation of the
    same source, duplicate candidates of a GRPO group on two GPUs) broke each other: as root each worker is given
    the cache under its own fresh uid (``assign`` chowns it), so the other's build failed on permissions, and a
    build killed mid-way left torch's ``lock`` file, on which every later load of that source waited until its
    timeout (H100, ninth session: a prebuild failed and an evaluation waited 60 s)."""
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache_dir.parent / f".{cache_dir.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise TimeoutError(f"the compile cache of this source is in use by another worker (waited "
                                   f"{timeout:.0f} s): {cache_dir}") from None
            time.sleep(0.05)
    for stale in (cache_dir / "torch_extensions").glob("**/lock"):
        try:
            stale.unlink()
        except OSError:
            pass
    return fd


def side_memfd() -> int | None:
    """A fresh anonymous memory file for one worker's large replies (ipc.SIDE_MIN_BYTES; close-on-exec, so only
    the worker it is passed to holds it), or None where memfd_create is missing: the pipe carries everything."""
    try:
        return os.memfd_create("kernelrl-out", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None


class WorkerProcess:
    """One sandboxed worker and its channel."""

    def __init__(self, role: str, *, device: str, cache_dir: Path | None, mem_limit_mb: int | None, threads: int = 1,
                 isolate_net: bool = True, drop_privileges: bool = DROP_PRIVILEGES, module_source: str | None = None,
                 cpus: set[int] | None = None, blocking_sync: bool = False,
                 lock_timeout: float = CACHE_LOCK_WAIT_S, early_context: bool = True):
        """``cache_dir`` is this worker's own compile cache (keyed by its source hash by the caller), so a
        candidate can write only where its own builds live; ``module_source`` is written to ``self.module_path``
        inside the worker's private dir; ``cpus``: the CPU cores it may run on (the evaluator pins both workers of
        an evaluation to the same core: they never run at once, and launch-bound kernels are timed on the same
        core's speed); ``blocking_sync``: on CUDA, its device context sleeps in a synchronisation instead of
        spinning (BLOCKING_SYNC; worker._schedule_blocking_sync); ``lock_timeout``: how long a candidate
        worker waits for its source's compile cache (``lock_cache``)."""
        self.role = role
        self.tmp = scratch_dir(role)
        self.module_path = self.tmp / ("task_reference.py" if role == "ref" else "candidate.py")
        uid = fresh_uid() if (drop_privileges and role == "cand" and can_drop_privileges()) else None
        self.uid = uid
        cache_dir = cache_dir or self.tmp / "cache"  # a spare's own, until it is given one (assign)
        self.cache_dir = cache_dir
        self._cache_lock: int | None = None
        try:
            self.assign(module_source, cache_dir, lock_timeout)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        if role == "cand" and uid is None:
            hide_own_environ()  # the candidate shares our uid: keep it out of our /proc/<pid>/environ
        plan = mount_plan() if uid is not None else None
        for i in range(sum(len(subs) for _, subs in plan or [])):
            (self.tmp / f".m{i}").mkdir()
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        side = side_memfd()  # this worker's alone (close-on-exec here: no other child inherits it)
        self.log_path = self.tmp / "worker.log"
        log = open(self.log_path, "wb")
        env = scrubbed_env(self.tmp, cache_dir, threads)
        if blocking_sync and device.startswith("cuda"):
            env["KERNELRL_BLOCKING_SYNC"] = "1"
        if early_context:  # its device context begins beside its torch import (not for a worker that runs on the CPU)
            env.update(worker_context.for_worker(device))
        if device.startswith("cuda"):
            mem_limit_mb = None  # CUDA reserves huge virtual ranges: RLIMIT_AS would break it
        # Spawned and registered under the registry lock: another thread's kill_orphans must never see this
        # worker as an unknown child (it killed fresh workers of concurrent evaluations: "Broken pipe").
        side_args = [str(side), str(ipc.SIDE_MIN_BYTES)] if side is not None else []
        with REGISTRY_LOCK:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kernelrl.evaluation.worker", str(p2c_r), str(c2p_w), *side_args],
                pass_fds=(p2c_r, c2p_w, *([side] if side is not None else [])),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.tmp, env=env,
                start_new_session=True, preexec_fn=_preexec(mem_limit_mb, isolate_net, uid, plan, self.tmp, cpus),
            )
            ACTIVE_WORKERS.add(self.proc.pid)
            if uid is not None:
                ACTIVE_UIDS[self.proc.pid] = uid
        log.close()
        os.close(p2c_r)
        os.close(c2p_w)
        self.chan = Channel(c2p_r, p2c_w, side_fd=side)
        self.fds = (c2p_r, p2c_w, *([side] if side is not None else []))
        self.stopped = False
        self.warmed: dict = {}  # the reply to its warm-up request, once it made one (spares.py, Session.start_ref)
        self.frozen_pids: set[int] = set()
        self.thawed_pids: set[int] = set()  # the processes thawed last (cpu_seconds)
        self.network_isolated = isolate_net and _netns_differs(self.proc.pid)

    def assign(self, module_source: str | None, cache_dir: Path, lock_timeout: float = CACHE_LOCK_WAIT_S) -> None:
        """Give the worker its module file and compile cache (owned by its uid when it has one). Done at start,
        or later for a spare worker started ahead of time: the cache directories then reach it with ``load``
        (its environment names a cache only from the start). A candidate's cache outside its own scratch dir is
        held for this worker alone until it is closed (``lock_cache``; TimeoutError after ``lock_timeout``)."""
        if self.role == "cand" and not cache_dir.is_relative_to(self.tmp):
            fd = lock_cache(cache_dir, lock_timeout)
            self._release_cache()
            self._cache_lock = fd
        cache_dir.mkdir(parents=True, exist_ok=True)
        if module_source is not None:
            self.module_path.write_text(module_source)
        self.cache_dir = cache_dir
        if self.uid is not None:
            for sub in ("torch_extensions", "triton", "inductor"):
                (cache_dir / sub).mkdir(exist_ok=True)
            for path in [self.tmp, *self.tmp.rglob("*"), cache_dir, *cache_dir.rglob("*")]:
                try:
                    os.chown(path, self.uid, self.uid)
                except OSError:
                    pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    def request(self, header: dict, tensors=None, timeout: float | None = None, spin_s: float = 0.0):
        """Send one command and wait for its reply; ``spin_s``: busy-poll for the reply that long first (the
        timed spans: see ``Channel.spin_until_readable``)."""
        self.chan.send(header, tensors)
        return self.chan.recv(timeout, spin_s=spin_s)

    def tree(self) -> list[psutil.Process]:
        try:
            p = psutil.Process(self.pid)
            return [p, *p.children(recursive=True)]
        except psutil.Error:
            return []

    def all_pids(self) -> list[int]:
        """The worker and everything it started: by its own uid when it has one (nothing escapes that), else
        by its process tree."""
        pids = {p.pid for p in self.tree()}
        if self.uid is not None:
            pids.update(pids_of_uid(self.uid))
        return sorted(pids)

    def freeze(self) -> None:
        """SIGSTOP the worker and everything it started. The processes are listed again after the signals
        until no new one shows up (one forked between the listing and its parent's stop is caught by the next
        listing); the stopped set is kept, so ``thaw`` needs no listing (a stopped process starts nothing)."""
        done: set[int] = set()
        for _ in range(8):
            new = [p for p in self.all_pids() if p not in done]
            if not new:
                break
            for pid in new:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except (ProcessLookupError, PermissionError):
                    pass
            done.update(new)
        self.frozen_pids = done
        self.stopped = True

    def stopped_now(self) -> bool:
        """The worker process itself is stopped (state T: by us, or by a candidate sharing our uid)."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
        except (OSError, IndexError):
            return False

    def thaw(self) -> None:
        pids = self.frozen_pids if self.stopped and self.frozen_pids else set(self.all_pids())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        self.thawed_pids = set(pids)
        self.frozen_pids = set()
        self.stopped = False

    def cpu_seconds(self) -> float:
        """CPU time (user + system, every thread) of the worker and of the processes it had when last frozen, read
        from the kernel's per-process CPU clocks (clock_gettime on a process's CPUCLOCK_SCHED: nanoseconds, no
        permission needed for another uid, ~0.4 us a read). The kernel keeps it, so nothing in the worker can
        shrink it. A process started after the last freeze and gone before the next is not in it (the
        leftover-processes check sees only those that remain)."""
        total = 0
        for pid in {self.pid, *self.frozen_pids, *self.thawed_pids}:
            try:
                total += time.clock_gettime_ns(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
            except OSError:  # exited
                pass
        return total / 1e9

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_reason(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> list[int]:
        """Kill the worker, its process group and (by uid) everything it started; returns the pids that were
        still alive besides the worker itself."""
        leftovers = [p for p in self.all_pids() if p != self.pid]
        for _ in range(20):  # stop first so a fork loop cannot outrun the kill, then kill, until none is left
            pids = self.all_pids()
            if not pids or (pids == [self.pid] and self.proc.poll() is not None):
                break
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.poll()
            for pid in pids:  # orphans re-parented to us (we are a subreaper) stay zombies until reaped
                if pid != self.pid:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except (ChildProcessError, OSError):
                        pass
            time.sleep(0.01)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._release_cache()  # after the kill: nothing of this worker builds in the cache any more
        with REGISTRY_LOCK:
            ACTIVE_WORKERS.discard(self.proc.pid)
            ACTIVE_UIDS.pop(self.proc.pid, None)
        return leftovers

    def _release_cache(self) -> None:
        fd, self._cache_lock = self._cache_lock, None
        if fd is not None:
            os.close(fd)


def _netns_differs(pid: int) -> bool:
    for _ in range(50):
        try:
            return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        except OSError:
            time.sleep(0.01)
    return False


ACTIVE_WORKERS: set[int] = set()  # workers of evaluations running in this process (several threads may evaluate)
ACTIVE_UIDS: dict[int, int] = {}  # worker pid -> its candidate's own uid (when privileges are dropped)
REGISTRY_LOCK = threading.Lock()  # spawning + registering a worker vs. kill_orphans scanning our children


def child_pids() -> list[int]:
    return [c.pid for c in psutil.Process().children(recursive=False)]


def kill_orphans(known: set[int]) -> list[int]:
    """Kill our direct children that we did not start: orphans of a candidate re-parented to us (we are a
    child subreaper). Workers of other evaluations running in this process are left alone."""
    killed = []
    with REGISTRY_LOCK:
        # An orphan owned by another running evaluation's candidate uid is that evaluation's to find and flag
        # (its close() kills everything of its uid); killing it here would flag the wrong candidate.
        own = {ACTIVE_UIDS[p] for p in known if p in ACTIVE_UIDS}
        others = set(ACTIVE_UIDS.values()) - own
        for child in psutil.Process().children(recursive=False):
            if child.pid in known or child.pid in ACTIVE_WORKERS:
                continue
            try:
                if others and child.uids().real in others:
                    continue
                for p in [*child.children(recursive=True), child]:
                    p.kill()
                killed.append(child.pid)
            except psutil.Error:
                pass
    return killed
