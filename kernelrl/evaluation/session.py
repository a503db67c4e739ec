"""One evaluation's processes and the trusted clock (``Session``): starting the reference and candidate workers
(spares when ready), every request to them with the candidate frozen whenever the reference runs, and the
timed phases of a block (stage, go, digest) on the host clock or, through ``HeldPhases`` (session_held.py), the
held one."""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import time
from pathlib import Path

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.calibrate import uses_held_clock
from kernelrl.evaluation.compare import compare, one_cpu_thread
from kernelrl.evaluation.correctness import note_variation, reference_variation
from kernelrl.evaluation.held import HeldBook, Semaphores
from kernelrl.evaluation.ipc import ProtocolError, Timeout
from kernelrl.evaluation.loading import LoadTimeout, wait_for_load
from kernelrl.evaluation.placement import PIN_CPU, keep_off_cores, pin_threads, restore_affinity, timing_cores
from kernelrl.evaluation.result import (TASK_ERRORS, CandidateFailed, EvalResult, EvaluatorError, TaskBroken,
                                       candidate_frames)
from kernelrl.evaluation.sandbox import WorkerProcess, scratch_dir
from kernelrl.evaluation.session_held import HeldPhases, reply_seconds
from kernelrl.evaluation.spares import PRESTART_WAIT_S, SPARES, with_compiler, worker_kwargs
from kernelrl.evaluation.static import preimports_compiler
from kernelrl.evaluation.worker_inputs import VARIANTS


# Busy-poll (no sleeping) around each timed span, in the parent and in the worker about to be timed. A process woken
# from a blocking read pays the scheduler's wake-up latency, which varies on a virtual machine and lands on the clock
# twice per span; and a worker that slept a few ms before its span (while the parent froze the other side) ran it up
# to 2x slower on a CPU VM, a bias against whichever side waited longer. The parent's thread keeps off the timing
# cores while it spins.
SPIN_WAIT = True


# Keep this many worker processes per role started ahead (torch imported, device context made; no task or candidate
# code) for the next evaluation: saves ~5 s of start-up per evaluation on an H100 host. Each is used by one evaluation
# only, and none starts while an evaluation is timed, so with one per role every other back-to-back evaluation found
# none ready. -1: 2 on CUDA, 0 on CPU (where a background start would compete with the timing for the cores); 0: start
# workers when needed.
SPARE_WORKERS = -1


# Threads that start spare workers side by side (the most any evaluation of this process asked for). A held evaluation
# takes three spares (reference, candidate, holder): with 2 threads, paused while timing, their replacements (~5 s
# each) fell behind and on the H100 (eighth session) 35% of warm evaluations found no holder ready and paid 4-7 s of
# start-up (433 evaluations per GPU-hour). 3 starts the three replacements at once.
SPARE_STARTERS = 3

# How long an evaluation waits for a spare of its kind that is still starting, when none is ready: it is further
# along than a worker started now would be, so waiting never costs more than starting afresh (unless it is frozen
# beside another evaluation's timing, hence a bound). A spare for a torch.compile candidate also imports dynamo and
# inductor (~6-7 s on an H200 host, static.preimports_compiler), as long as a back-to-back compile evaluation.
SPARE_WAIT_S = 30.0



# The candidate's load limit is at least this many times the reference's own load on this host (a big model's
# weights built on a slow CPU), else EvalConfig.load_timeout_s.
LOAD_REF_FACTOR = 3.0


# A correctness set (or an audited call) whose outputs are this many bytes or more is compared on the GPU by the
# reference's worker (worker_share.py, CUDA IPC) instead of crossing the host twice: at 64 MiB a set the host path
# costs a fraction of a second (memfd, ipc.SIDE_MIN_BYTES); KernelBench's 6.4 GB outputs took minutes.
DEVICE_COMPARE_MIN_BYTES = 64 * 1024**2
# A reference state (weights, buffers) of this many bytes or more is not shipped to the candidate whole: both sides
# compare exact prints and only what differs crosses the host (_load_state). 8 KernelBench problems have 1-8 GiB of
# weights (bench/results/2026-11-28-cpu-kernelbench-sizes), which the host path ships at ~1 GiB/s at best.
STATE_PRINT_MIN_BYTES = 256 * 1024**2
# Between phases, a worker whose input and output sets are this large a set gives its cached device memory back
# (worker_memory.cmd_trim): two workers share one GPU, and what one's allocator keeps the other cannot use (KernelBench
# self-pairs with 7-16 GiB inputs failed with out-of-memory on a 140 GiB H200). Smaller tasks skip it: their cache
# is small and a warm allocator is part of the state both sides are timed in.
TRIM_MIN_BYTES = 1024**3


class Session(HeldPhases):
    """One evaluation: two workers and the trusted clock."""

    def __init__(self, task_source: str, cand_source: str, cfg: EvalConfig, device: str, progress):
        self.cfg = cfg
        self.device = device
        self.progress = progress
        self.rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        # Outputs compared on the device (on_device) while this holds; bytes of one set's outputs (calibration)
        self.share_ok, self.out_bytes = True, 0
        self.state_prints, self.state_shipped = None, None  # a large state's prints; how many tensors it shipped
        self.trimmed: dict[str, list] = {}  # trim(): MiB reserved before and after, per role
        self.peak_reserved: dict[str, int] = {}  # trim(): the most MiB each worker's allocator held (version 23)
        self.dir = scratch_dir("eval")  # the parent's own scratch (0700); stale ones are reaped
        self.task_source, self.cand_source = task_source, cand_source
        # Compile caches keyed by source hash: a candidate can write only where its own builds live, and a
        # re-evaluation of the same source (re-verification, repeats) finds its load_inline/Triton builds.
        root = Path(cfg.cache_dir or (Path(tempfile.gettempdir()) / "kernelrl-compile-cache"))
        self.cand_cache = root / "cand" / candidate_hash(cand_source)[:24]
        self.ref_cache = root / "ref" / candidate_hash(task_source)[:24]
        self.ref: WorkerProcess | None = None
        self.cand: WorkerProcess | None = None
        self.cand_code_ran = False
        self.seed = self.rng.randrange(2**31)
        self.deadline = time.monotonic() + cfg.max_wall_s
        self.before: set[int] = set()
        self.cpus = timing_cores(device) if PIN_CPU else None
        # Busy-polling around the timed spans (see go); the parent thread stays off the timing cores meanwhile.
        self.spin = bool(SPIN_WAIT)
        # Harness seconds a timing block adds to each side beyond its stage and digest (see go, drain_for_ref):
        # both sides' parent-timed quiesce, and the candidate's leftover GPU work drained before the reference runs.
        self.extra = {"ref": 0.0, "cand": 0.0}
        self.harness_cpu = {"ref": 0.0, "cand": 0.0}  # CPU seconds of stage + digest (kernel clock; diagnostic)
        self.spares_used = 0
        # EvalConfig.clock = "held" (kernelrl/evaluation/held.py): the holder process, the semaphore pages, each
        # side's last phase number, the holder's spin rate and its queueing time per spin of a chain
        self.holder: WorkerProcess | None = None
        self.sems: Semaphores | None = None
        self.seq = {"ref": 0, "cand": 0}
        self.spin_rate = 0.0
        self.holder_q: list[float] = []
        self.book = HeldBook()
        # each side's host queueing time per kind of held phase, as its replies say (a hold outlasts it; the
        # candidate's counts up to 10x the reference's); queue0: the first estimate (unheld parent-clock seconds)
        self.queue = {kind: {"ref": [], "cand": []} for kind in ("go", "stage", "digest")}
        self.queue0 = {"go": 1e-3, "stage": 1e-3, "digest": 1e-3}
        self.queue_full = False  # the reference's last held block: its queueing lasted its hold (ref_block_held)
        # EvalConfig.cuda_graphs: which side's held spans replay its captured graphs (the reference alone in
        # calibration; then both, the reference alone when the candidate could not be captured (version 13), or
        # neither), the calls per graph and graphs per block
        self.replay = {"ref": False, "cand": False}
        self.graph_k, self.graph_spans = 0, 0
        self.graphs: dict = {}  # what timing.graphs reports
        self.drain_log: list[list] = []  # the holder's drains, for timing.rounds_raw (holder_drain)
        self.last_phase = ""  # "side:cmd" of the last held phase (the drain log's "after")
        self.phases: dict[str, float] = {}
        self.keep_rounds = False  # evaluate(keep_rounds=True): timing.rounds_raw (analysis)
        self.eager_estimate = True  # evaluate(eager_estimate=False): no eager estimate (eager.py; re-verification)
        self.ref_load_s = 0.0  # how long the reference's load took (the candidate's load limit scales with it)
        self._t_mark = time.monotonic()

    def mark(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(self.phases.get(phase, 0.0) + now - self._t_mark, 4)
        self._t_mark = now

    # -- workers ------------------------------------------------------------------------------------------------
    def start_ref(self) -> None:
        # Both processes start now (interpreter + torch import in parallel); the candidate's code is loaded
        # only after the reference's clean baseline has been measured.
        # Workers start (interpreter, torch import, device context, later the candidate's build) on the spare
        # cores, or anywhere when there are none, and move to the timing cores once loaded: two imports of torch
        # pinned to one core took twice as long.
        common = worker_kwargs(self.cfg, self.device, pinned=self.cpus is not None)
        n_spares = SPARE_WORKERS if SPARE_WORKERS >= 0 else 2 * self.device.startswith("cuda")
        SPARES.per_key = max(SPARES.per_key, n_spares)
        SPARES.starters = max(SPARES.starters, SPARE_STARTERS)
        # workers this process started for its evaluation before it imported torch (spares.prestart: the cold
        # `kernelrl eval`) are waited for while they start: they are further along than a worker started now
        use_spares = n_spares > 0 or SPARES.prestarted
        spare_wait = PRESTART_WAIT_S if SPARES.prestarted else SPARE_WAIT_S
        fresh_cand = False
        for role, source, cache in (("cand", self.cand_source, self.cand_cache), ("ref", self.task_source,
                                                                                  self.ref_cache)):
            w = SPARES.take(role, with_compiler(common, source), wait_s=spare_wait) if use_spares else None
            wait = self._left(self.cfg.compile_timeout_s)  # for the source's compile cache (sandbox.lock_cache)
            try:
                if w is not None:
                    w.assign(source, cache, wait)
                    self.spares_used += 1
                else:
                    w = WorkerProcess(role, cache_dir=cache, module_source=source, lock_timeout=wait, **common)
                    fresh_cand = fresh_cand or role == "cand"
            except TimeoutError as e:
                if w is not None:
                    w.close()
                raise CandidateFailed("timeout", str(e), executable=False) from None
            setattr(self, role, w)
        # A fresh candidate worker finishes its start-up (interpreter, torch import, device context: cmd_warm, as a
        # spare does ahead of time) while the reference loads, instead of frozen halfway by the reference's first
        # request and resumed only after calibration: the cold `kernelrl eval` on the H100 spent 6.3-6.6 s in the
        # candidate's "build" of a plain-PyTorch ELU, all of it that start-up (bench/results/
        # 2026-11-28-h100x4-evaluator-v13b). No candidate code exists in it yet, and the reference's load is not
        # timed; it is idle (and frozen as before) by the time calibration starts.
        if fresh_cand:
            self.cand.chan.send({"cmd": "warm", "device": self.device,
                                 "compiler": preimports_compiler(self.cand_source)})
        if uses_held_clock(self):
            kw = worker_kwargs(self.cfg, self.device, pinned=self.cpus is not None, holder=True)
            w = SPARES.take("holder", kw, wait_s=spare_wait) if use_spares else None
            self.holder = w if w is not None else WorkerProcess("holder", cache_dir=None, **kw)
            self.sems = Semaphores(self.cand.uid)
        t_load = time.monotonic()
        h, state = self._req(self.ref, {"cmd": "load", "role": "ref", "path": str(self.ref.module_path),
                                        "cache_dir": str(self.ref.cache_dir), "device": self.device, "seed": self.seed,
                                        "train_mode": self.cfg.train_mode, "state_print_min": STATE_PRINT_MIN_BYTES},
                             timeout=self.cfg.max_wall_s, harness=True, hold=not fresh_cand)
        self.ref_load_s = time.monotonic() - t_load
        if fresh_cand:
            self._cand_warmed()
        pin_threads(self.ref.pid, self.cpus)
        if self.holder is not None:
            hh, _ = self._req(self.holder, {"cmd": "holder", "device": self.device, "paths": self.sems.paths},
                              timeout=self._left(120), harness=True, hold=False)
            self.spin_rate = float(hh["spin_rate"])
            self._req(self.ref, {"cmd": "sem", "path": self.sems.paths["ref"]}, timeout=self._left(60), harness=True)
        self.init_inputs = h["init_inputs"]
        self.template = h["template"]
        self.state_names, self.state, self.state_prints = h["state_names"], state, h.get("state_prints")

    def _load_state(self) -> None:
        """The reference's weights into the candidate's model. A state of STATE_PRINT_MIN_BYTES or more is compared
        first by exact prints (worker_load.exact_print) and only the tensors the candidate's own differ in cross
        the host: both sides build their model from the same seed, so a rewrite that keeps the layers has them
        all already."""
        if self.state_prints is None:
            self._req(self.cand, {"cmd": "load_state", "names": self.state_names}, self.state,
                      timeout=self._left(60))
            return
        h, _ = self._req(self.cand, {"cmd": "load_state", "names": self.state_names, "prints": self.state_prints},
                         timeout=self._left(120))
        known, miss = set(self.state_names), h.get("missing")
        miss = [n for n in miss if isinstance(n, str) and n in known] if isinstance(miss, list) else self.state_names
        self.state_shipped = len(miss)
        if miss:
            hr, ts = self._req(self.ref, {"cmd": "state", "names": miss}, timeout=self._left(120), harness=True)
            self._req(self.cand, {"cmd": "load_state", "names": hr["names"]}, ts, timeout=self._left(120))

    def _cand_warmed(self) -> None:
        """The fresh candidate worker's reply to ``warm`` (start_ref), before anything else is asked of it. Only our
        worker code has run in it: a failure here is its start-up's (the candidate is charged, as when its load
        cannot start)."""
        try:
            h, _ = self.cand.chan.recv(timeout=self._left(max(self.cfg.load_timeout_s, 120.0)))
        except Timeout:
            raise CandidateFailed("timeout", "the candidate's worker did not start", executable=False) from None
        except (ProtocolError, OSError):
            raise CandidateFailed("crashed", f"candidate process {self.cand.exit_reason()} while starting: "
                                  f"{self.cand.log_tail(600)}", executable=False) from None
        if not h.get("ok"):
            raise CandidateFailed("crashed", f"the candidate's worker could not start: {h.get('error')}",
                                  executable=False)
        self.cand.warmed = h

    def start_cand(self) -> dict:
        self.cand_code_ran = True
        self.hold(self.cand)
        try:
            self.cand.chan.send({"cmd": "load", "role": "cand", "path": str(self.cand.module_path),
                                 "cache_dir": str(self.cand.cache_dir), "device": self.device, "seed": self.seed,
                                 "train_mode": self.cfg.train_mode,
                                 "init_inputs": self.init_inputs, "template": self.template,
                                 "task_source": self.task_source})
            # its own short limit outside compilers (kernelrl/evaluation/loading.py), never below a few times
            # what the reference's load took here (large weights built on a slow host)
            wait_for_load(self.cand, total_s=self._left(self.cfg.compile_timeout_s),
                          load_s=max(self.cfg.load_timeout_s, LOAD_REF_FACTOR * self.ref_load_s))
            h, _ = self.cand.chan.recv(timeout=self._left(self.cfg.compile_timeout_s))
        except LoadTimeout as e:
            raise CandidateFailed("timeout", str(e), executable=False) from None
        except Timeout:
            raise CandidateFailed("timeout", "building ModelNew timed out", executable=False) from None
        except (ProtocolError, OSError):  # OSError: a broken pipe to a worker that died before it read the request
            raise CandidateFailed("crashed", f"candidate process {self.cand.exit_reason()} while loading: "
                                  f"{self.cand.log_tail(600)}", executable=False) from None
        if not h.get("ok"):
            flag = "out-of-memory" if h.get("kind") == "OutOfMemory" else "build-failed"
            raise CandidateFailed(flag, str(h.get("error", "load failed")) + candidate_frames(
                                  h.get("traceback"), self.cand.module_path),
                                  executable=False)
        self._load_state()
        if self.holder is not None:
            self._req(self.cand, {"cmd": "sem", "path": self.sems.paths["cand"]}, timeout=self._left(60))
        pin_threads(self.cand.pid, self.cpus)
        return h

    def _left(self, cap: float) -> float:
        return max(0.5, min(cap, self.deadline - time.monotonic()))

    def _req(self, worker: WorkerProcess, header: dict, tensors=None, timeout: float | None = None,
             harness: bool = False, spin_s: float = 0.0, hold: bool = True):
        """A request to a worker. ``harness``: the reference; its failure is the task's (EvaluatorError) before
        any candidate code ran, and counted against the candidate afterwards (it may have held the GPU's memory
        or left the device broken)."""
        role = "reference" if worker is self.ref else "candidate"

        def ref_failed(msg: str, task_error: bool = False):
            if self.cand_code_ran:
                return CandidateFailed("reference-disturbed", f"{msg} (after the candidate ran)")
            return TaskBroken(msg) if task_error else EvaluatorError(msg)

        if hold:
            self.hold(worker)
        try:
            h, out = worker.request(header, tensors, timeout=timeout, spin_s=spin_s)
        except Timeout:
            if harness:
                raise ref_failed(f"the reference worker timed out on {header['cmd']}") from None
            raise CandidateFailed("timeout", f"candidate exceeded {timeout:.1f} s on {header['cmd']}") from None
        except (ProtocolError, OSError) as e:
            if harness:
                raise ref_failed(f"reference worker died ({worker.exit_reason()}, {e}): "
                                 f"{worker.log_tail(800).strip()[-800:]}") from None
            reason = worker.exit_reason()
            flag = "out-of-memory" if "SIGKILL" in reason and "memory" in worker.log_tail().lower() else "crashed"
            if reason == "still running":
                reason = f"broke the protocol ({e})"
            raise CandidateFailed(flag, f"candidate process {reason} during {header['cmd']}: "
                                  f"{worker.log_tail(600).strip()[-600:]}") from None
        if not h.get("ok"):
            if harness:
                raise ref_failed(f"the {role} failed on {header['cmd']}: {h.get('error')}",
                                 task_error=header["cmd"] == "load" and h.get("kind") in TASK_ERRORS)
            err = str(h.get("error", ""))[:2000]
            if "OUTPUT_SUBCLASS" in err:
                raise CandidateFailed("output-subclass", err.replace("OUTPUT_SUBCLASS: ", ""))
            flag = "out-of-memory" if h.get("kind") == "OutOfMemory" else "runtime-error"
            raise CandidateFailed(flag, err + candidate_frames(h.get("traceback"), worker.module_path))
        return h, out

    # -- inputs and runs ----------------------------------------------------------------------------------------
    def draw_seeds(self, n: int, variants: bool = True) -> tuple[list[int], list[str]]:
        """Seeds and random-source variants (VARIANTS) of ``n`` fresh correctness input sets, drawn here."""
        return ([self.rng.randrange(2**31) for _ in range(n)],
                [self.rng.choice(VARIANTS) if variants else "normal" for _ in range(n)])

    def draw_run(self, worker: WorkerProcess, seeds: list[int], variants: list[str], timeout: float,
                 ship: bool = True, keep: bool = False, prints: bool = False,
                 transient: bool = False) -> tuple[float, dict, list]:
        """The worker draws each input set on its own device (worker.cmd_draw_run) and runs forward on it; its
        outputs come back (``ship`` false: their shapes only; ``keep``: they stay in the worker for
        compare_kept, the candidate's exported: worker_share.keep_outputs takes what the handler would have
        sent; ``prints``: the reference's kept outputs' exact prints too, for the task audit). Seconds on the
        parent's clock, reply, outputs. ``transient``: the reply's ``transient_bytes`` is measured (a GPU's
        forward temporaries, worker_memory.forward_transient)."""
        t0 = time.perf_counter()
        h, outs = self._req(worker, {"cmd": "draw_run", "seeds": seeds, "variants": variants, "ship": ship,
                                     **({"transient": True} if transient else {}),
                                     **self._keep_header(worker, keep, prints)},
                            timeout=timeout, harness=worker is self.ref)
        return time.perf_counter() - t0, h, outs

    def _keep_header(self, worker: WorkerProcess, keep: bool, prints: bool = False) -> dict:
        if not keep:
            return {}
        return {"keep": True, "prints": prints} if worker is self.ref else {"keep": True, "export": True}

    def on_device(self, out_bytes: int) -> bool:
        """Outputs of ``out_bytes`` a set are compared on the GPU (compare_kept) rather than shipped."""
        return self.share_ok and self.device.startswith("cuda") and out_bytes >= DEVICE_COMPARE_MIN_BYTES

    def compare_kept(self, hr: dict, hc: dict, timeout: float, sets: list | None = None) -> tuple[str, dict | str]:
        """The outputs both workers kept (draw_run or fetch with ``keep``) compared on the device by the
        reference's worker (worker_share.cmd_compare_kept; ``sets``: each set as worker_variation.cmd_rerun names
        it, so a wrong output is judged there against the reference's variation and precision). ("ok", {"bad":
        None | (set index, flag, reason), "judged": [(set index, record)], "unjudged": the bad set could not be
        judged there}), or
        ("fallback", reason) when the candidate's outputs could not be mapped: IPC unavailable here (then
        share_ok goes false for the rest of the evaluation) or a descriptor that is not valid; the caller
        asks both again with shipping."""
        ipc, st = hc.get("ipc"), hc.get("structure")
        # checked here, so a malformed reply is never the reference worker's failure
        if (not isinstance(ipc, list) or "ipc_error" in hc or not all(isinstance(d, dict) for d in ipc)
                or not isinstance(st, list) or not all(isinstance(x, int) for x in st) or len(ipc) != sum(st)):
            self.share_ok = False
            return "fallback", str(hc.get("ipc_error") or "no descriptors")
        judge = {"sets": sets, "out_bytes": self.out_bytes} if sets else {}
        h, _ = self._req(self.ref, {"cmd": "compare_kept", "ipc": ipc, "ref_structure": hr.get("structure"),
                                    "cand_structure": st, **judge}, timeout=timeout, harness=True)
        if h.get("ipc_failed"):
            self.share_ok = False
            return "fallback", str(h["ipc_failed"])
        bad = h.get("bad")
        return "ok", {"bad": (int(bad[0]), str(bad[1]), str(bad[2])) if bad else None,
                      "judged": [(int(i), dict(rec)) for i, rec in h.get("judged") or []],
                      "unjudged": bool(h.get("unjudged")), "times_s": dict(h.get("times_s") or {})}

    def trim(self, set_bytes: int, *workers: WorkerProcess, graphs: bool = False) -> None:
        """Between phases, when a set (inputs and outputs of one call) is TRIM_MIN_BYTES or more: ``workers`` drop
        what the last phase left (staged sets, kept outputs; ``graphs``: their captured graphs, when they are
        timed eagerly from now on) and return their cached device memory (worker_memory.cmd_trim). Reserved MiB before
        and after, per role, in ``self.trimmed``; the most each worker's allocator held up to then in
        ``self.peak_reserved``."""
        if set_bytes < TRIM_MIN_BYTES or not self.device.startswith("cuda"):
            return
        for w in workers:
            h, _ = self._req(w, {"cmd": "trim", "graphs": graphs}, timeout=self._left(60), harness=w is self.ref)
            role = "ref" if w is self.ref else "cand"
            try:  # a report only; the candidate's worker could send anything
                mib = [int(h.get("reserved_before") or 0) >> 20, int(h.get("reserved_after") or 0) >> 20]
            except (TypeError, ValueError, OverflowError):  # JSON allows Infinity
                mib = None
            self.trimmed.setdefault(role, []).append(mib)
            try:  # report only, as above: the most its allocator held up to now (timing.peak_reserved_mib)
                self.peak_reserved[role] = max(self.peak_reserved.get(role, 0), int(h.get("reserved_peak") or 0) >> 20)
            except (TypeError, ValueError, OverflowError):  # JSON allows Infinity
                pass

    def hold(self, worker: WorkerProcess) -> None:
        """Before every request to ``worker`` (``_req``): whenever the reference runs (a timed span, a harness phase, a
        correctness trial) the candidate's processes are frozen (SIGSTOP, every process of its uid), so nothing of
        the candidate's runs beside it; whenever the candidate runs, they are thawed. The state is kept between
        commands, so consecutive commands of one side cost no signals (spans alternate strictly: one freeze and one
        thaw per pair). The reference is never frozen (it is our code, idle in a read between its commands); it
        is thawed first when the candidate shares our uid (it could have stopped it)."""
        cand = self.cand
        if worker is self.ref:
            if cand is not None and cand.uid is None and worker.stopped_now():
                worker.thaw()
            if cand is not None and not cand.stopped and cand.alive():
                cand.freeze()
        elif worker.stopped:
            worker.thaw()

    def stage(self, worker: WorkerProcess, k: int, seed: int, timeout: float) -> float:
        """Harness: ``k`` input sets drawn on the device from ``seed``, L2 evicted. Seconds (parent clock; the
        other side is frozen or thawed before the clock starts: that listing is no part of either side's harness)."""
        return self._harness_phase(worker, {"cmd": "stage", "seed": seed, "k": k}, timeout)[0]

    def _harness_phase(self, worker: WorkerProcess, header: dict, timeout: float) -> tuple[float, dict]:
        """One harness request (``stage`` or ``digest``) timed on the parent's clock: the reference's queue drained
        or the candidate settled first, the other side frozen or thawed before the clock starts, the worker's CPU
        time added to its side's harness total, the reference's time kept as that phase's queueing baseline.
        (seconds, reply header)."""
        if worker is self.ref:
            self.drain_for_ref()
        else:
            self.settle_cand()
        self.hold(worker)
        c0 = worker.cpu_seconds()
        t0 = time.perf_counter()
        h, _ = self._req(worker, header, timeout=timeout, harness=worker is self.ref, hold=False)
        dt = time.perf_counter() - t0
        self.harness_cpu["ref" if worker is self.ref else "cand"] += worker.cpu_seconds() - c0
        if worker is self.ref:
            self.queue0[header["cmd"]] = dt
        return dt, h

    def go(self, worker: WorkerProcess, n: int, timeout: float, expect_s: float = 0.0,
           device_spin_s: float | None = None, hold_s: float | None = None) -> tuple[float, float, dict]:
        """The timed span: the next ``n`` staged calls and a device-wide sync. Before it, outside the span, the
        worker waits until the device has drained any work the other side left queued (``quiesce``; on CUDA;
        this also takes the GPU's context switch off the clock) and then busy-polls for the ``go``, while the
        parent busy-polls for its reply (``spin``): no scheduler wake-up on either side lands on the clock.
        ``expect_s``: the span's expected length (how long the parent spins before blocking). Returns (seconds,
        seconds spent draining, the worker's reply). ``device_spin_s`` (EvalConfig.clock = "device"): the worker
        also times the calls on the device's clock behind a spin kernel this long; its reply then holds dev_s,
        spin_done_s and queued_s, and the parent's seconds stay the check on them. ``hold_s`` (EvalConfig.clock =
        "held"): the span is a held phase (``held``): the reply then carries the Phase under "phase"; the quiesce
        counts in neither side's harness (GPU work the candidate left queued is measured by the holder instead,
        ``holder_drain``)."""
        is_ref = worker is self.ref
        spin = self.spin
        waited = 0.0
        if spin and is_ref and self.cand is not None and not self.cand.stopped:
            # The reference is told to spin before the candidate is frozen (listing its processes takes a few
            # ms), so it waits for its span on its core, hot, as the candidate does after a thaw: a worker that
            # slept those ms ran its next span up to 2x slower (CPU VM), a bias against whichever side waits.
            self._req(self.ref, {"cmd": "spin", "spin_s": 0.05}, timeout=self._left(60), harness=True, hold=False)
        drain = (self.holder_drain(worker, "go" if n else "empty") if hold_s is not None and not is_ref
                 else (0.0, ""))
        self.hold(worker)  # once, before the drain and the clock
        if hold_s is not None and is_ref:
            drain = self.holder_drain(worker, "go" if n else "empty")
        if self.device.startswith("cuda") or spin:
            # Parent-timed on both sides and counted in each side's harness time (self.extra), except what the
            # reference waited for the candidate's leftover work, which is the candidate's: work a candidate
            # queued without a sync (its harness patched) and that ran while a worker waited here was on no clock.
            dq, waited = self._quiesce(worker, 0.05 if spin else 0.0)
            role = "ref" if is_ref else "cand"
            if hold_s is None:
                self.extra[role] += dq - waited
                self.extra["cand"] += waited
        if hold_s is not None:
            reply, ph = self.held(worker, {"cmd": "go", "n": n}, timeout, hold_s, expect_s, drain)
            return ph.wall, waited, {**reply, "phase": ph}
        # While it spins, this thread keeps off the timing cores (it would take one from the worker being timed);
        # only around the span: pinned for longer, torch's CPU thread pool in this process (the comparisons) ran
        # 10x slower, its threads waiting on one core.
        saved = keep_off_cores(self.cpus) if spin else None
        try:
            head = {"cmd": "go", "n": n}
            if device_spin_s is not None:
                head.update(clock="device", device_spin_s=device_spin_s)
            cpu0 = worker.cpu_seconds() if device_spin_s is not None else 0.0
            t0 = time.perf_counter()
            reply, _ = self._req(worker, head, timeout=timeout, harness=is_ref,
                                 spin_s=(3 * expect_s + 0.005) if spin else 0.0, hold=False)
            dt = time.perf_counter() - t0
            if device_spin_s is not None:
                # The worker's CPU time in the span, from the kernel (trusted; set here over whatever it replied):
                # host work done while the spin held the GPU is on no GPU clock, but it is on this one.
                reply = {**reply, "parent_cpu_s": worker.cpu_seconds() - cpu0}
            return dt, waited, reply
        finally:
            restore_affinity(saved)

    def digest(self, worker: WorkerProcess, dseed: int, calls: list[int], timeout: float) -> tuple[float, dict]:
        """Harness: every output's structure, and digests of the sampled ``calls``. (seconds, reply)."""
        return self._harness_phase(worker, {"cmd": "digest", "dseed": dseed, "calls": calls}, timeout)

    def ref_block(self, k: int, spans: int, expect_s: float = 0.0, device_spin_s: float | None = None,
                  replies: list | None = None) -> list[float]:
        """The reference alone (the candidate has run no code yet, or is frozen): ``spans`` timed spans of ``k``
        calls; their parent-clock seconds, or with ``device_spin_s`` their device-clock seconds (see go); the
        worker's replies are appended to ``replies``."""
        tmo = self._left(self.cfg.max_wall_s)
        self.stage(self.ref, k * spans, self.rng.randrange(2**31), tmo)
        out = []
        for _ in range(spans):
            dt, _, reply = self.go(self.ref, k, tmo, expect_s + (device_spin_s or 0.0), device_spin_s)
            out.append(dt if device_spin_s is None else reply_seconds(reply, "dev_s", dt))
            if replies is not None:
                replies.append(reply)
        self.digest(self.ref, self.rng.randrange(2**40), [], tmo)
        return out

    def capture(self, worker: WorkerProcess, k: int, spans: int, timeout: float) -> dict:
        """EvalConfig.cuda_graphs: the worker captures ``spans`` graphs of ``k`` calls (worker.cmd_capture), outside
        every clock; its reply says whether it could."""
        h, _ = self._req(worker, {"cmd": "capture", "k": k, "spans": spans, "seed": self.rng.randrange(2**31)},
                         timeout=timeout, harness=worker is self.ref)
        return h

    def ping(self) -> float:
        """The fixed cost of an empty timed span on the trusted reference: the round trip of ``go`` with nothing
        staged (and the device-wide sync), measured the way the spans are (quiesce and spin first)."""
        tmo = self._left(60)
        self._req(self.ref, {"cmd": "stage", "seed": 0, "k": 0}, timeout=tmo, harness=True)
        return self.go(self.ref, 0, tmo)[0]

    def audit(self, k: int, round_no: int, result: EvalResult | None = None, seed: int | None = None) -> None:
        """After the clock: the full outputs of one random call of the round just timed, from both workers,
        compared elementwise (a candidate that is exact only when it is fully checked, or precise enough only
        for the digest, is caught here). With the block's staging ``seed``, a wrong output is judged against the
        reference's own variation and precision on that call's inputs (correctness.reference_variation; on the
        device, by the reference's worker: version 20)."""
        self.audit_index(self.rng.randrange(k), round_no, result, None if seed is None else (seed, k))

    def audit_index(self, i: int, round_no: int, result: EvalResult | None = None,
                    staged: tuple[int, int] | None = None) -> None:
        keep = self.on_device(self.out_bytes)
        hr, ro = self._req(self.ref, {"cmd": "fetch", "index": i, **self._keep_header(self.ref, keep)},
                           timeout=self._left(120), harness=True)
        try:
            hc, co = self._req(self.cand, {"cmd": "fetch", "index": i, **self._keep_header(self.cand, keep)},
                               timeout=self._left(120))
        except CandidateFailed as e:
            raise CandidateFailed("timing-mismatch", f"timing round {round_no}: audit of call {i + 1}: {e}") from None
        bad, note = None, ""
        which = {"stage": {"seed": staged[0], "k": staged[1], "index": i, "replay": self.replay["ref"]}} \
            if staged and result is not None else None
        if keep:  # a wrong output judged on the device by the reference's worker (version 20), as here below
            how, got = self.compare_kept(hr, hc, self._left(120), sets=[which] if which else None)
            if how == "fallback":  # asked again, shipped (the workers still hold the round's outputs)
                return self.audit_index(i, round_no, result, staged)
            for _, rec in got["judged"]:
                note, within = note_variation(result, rec)
                if within:  # flagged there
                    return
            bad = got["bad"][1:] if got["bad"] else None
        else:
            with one_cpu_thread():
                bad = compare(ro, co, hr.get("structure"), hc.get("structure"))
        if bad and bad[0] == "wrong-output" and not keep and which:
            note, within = reference_variation(self, result, which, ro, co)
            if within:  # flagged there
                return
        if bad:
            raise CandidateFailed("timing-mismatch",
                                  f"timing round {round_no}: audit of call {i + 1}: {bad[1]}{note}")


def candidate_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()
