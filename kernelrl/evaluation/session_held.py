"""The parent's side of the quiesce before each phase and of the held clock (``EvalConfig.clock = "held"``,
kernelrl/evaluation/held.py): ``HeldPhases``, the ``Session`` methods that quiesce, hold, drain and settle."""

from __future__ import annotations

import math
import statistics
import time

from kernelrl.evaluation.held import Phase, hold_plan
from kernelrl.evaluation.placement import keep_off_cores, restore_affinity
from kernelrl.evaluation.sandbox import WorkerProcess


# clock='held': the holder's hold before a held phase lasts this many times the host's queueing time of the phase (the
# larger side's; +the holder's own queueing, +0.5 ms). Shorter holds starve the GPU (host gaps land on the clock);
# longer ones cost wall time: 3x made launch-bound Softmax spans 45 ms for 9 ms of GPU work on the H100 VM
# (2026-11-26, evaluations 2-3x longer than on the host clock).
HOLD_FACTOR = 2.0


# CUDA: before each reference round, a tiny kernel must finish within this many microseconds (idle latency is ~10-30
# us; work queued by another process delays it by a time slice or more).
QUIESCE_BUSY_US = 300.0


# CUDA: the longest the reference waits for the device to drain before it is timed anyway (the wait is recorded; a
# longer backlog then shows up as reference-slowed).
QUIESCE_LIMIT_S = 2.0


def reply_seconds(h: dict, key: str, default: float) -> float:
    """A number of seconds from a worker's reply; ``default`` where it is missing, no number, negative or
    infinite (a candidate's reply is untrusted)."""
    try:
        v = float(h.get(key, default))
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) and v >= 0 else default


class HeldPhases:
    """The ``Session`` methods of the quiesce before each phase and of the held clock (a mixin: the state they use,
    ``self.holder``, ``self.sems``, ``self.book``, ... is made in ``Session.__init__``)."""

    def _quiesce(self, worker: WorkerProcess, spin_s: float) -> tuple[float, float]:
        """One ``quiesce`` request (the worker waits until a tiny kernel runs at idle latency; see the worker):
        (parent-clock seconds of the request, seconds the *reference* waited beyond one idle probe). The second is
        GPU work the candidate left queued (the reference's own work is synchronised before it replies; a frozen
        process's kernels keep running): the candidate's cost, 0 for the candidate's own request (its report is
        not trusted; its request is parent-timed instead)."""
        is_ref = worker is self.ref
        t0 = time.perf_counter()
        hq, _ = self._req(worker, self._quiesce_header(spin_s), timeout=self._left(QUIESCE_LIMIT_S + 60),
                          harness=is_ref, hold=False)
        dt = time.perf_counter() - t0
        drained = 0.0
        if is_ref:
            try:
                drained = max(0.0, float(hq.get("waited_s") or 0.0) - float(hq.get("probe_s") or 0.0))
            except (TypeError, ValueError):
                drained = 0.0
        return dt, drained

    def _quiesce_header(self, spin_s: float) -> dict:
        """A ``quiesce`` request (worker.cmd_quiesce), the same for the workers and the holder."""
        return {"cmd": "quiesce", "limit_s": QUIESCE_LIMIT_S, "busy_s": QUIESCE_BUSY_US * 1e-6,
                "spin_s": spin_s}

    def drain_for_ref(self) -> None:
        """CUDA, before a reference's harness phase (stage, digest): the candidate's leftover GPU work (queued
        without a sync, by a patched harness or synchronize) drains first, on the candidate's account. Otherwise it
        ran beside the reference's staging, slowing *its* harness, which lowered the candidate's excess: work
        moved off the clock twice over. The request's own round trip is the reference's harness time (version 6;
        the candidate's phases get the same request, settle_cand)."""
        if not self.device.startswith("cuda") or self.cand is None or not self.cand_code_ran:
            return
        self.hold(self.ref)
        dq, drained = self._quiesce(self.ref, 0.0)
        self.extra["cand"] += drained
        self.extra["ref"] += dq - drained

    def settle_cand(self) -> None:
        """CUDA, before a candidate's harness phase: the same timed quiesce the reference gets (drain_for_ref), so
        both sides' phases start on a device that has switched to their context. Version 5 drained before the
        reference's phases only: a context switch then landed in the candidate's phases alone, and on the H100
        its median harness excess was +0.3 ms (host clock) to +1 ms per span (device clock) for honest candidates.
        Parent-timed into the candidate's harness (its reply is not used)."""
        if not self.device.startswith("cuda") or self.cand is None:
            return
        self.hold(self.cand)
        dq, _ = self._quiesce(self.cand, 0.0)
        self.extra["cand"] += dq

    def held(self, worker: WorkerProcess, header: dict, timeout: float, hold_s: float, expect_s: float = 0.0,
             drain: tuple[float, str] = (0.0, "")) -> tuple[dict, Phase]:
        """One held phase (EvalConfig.clock = "held"; kernelrl/evaluation/held.py): the holder queues its hold
        (a chain of short spins, ~``hold_s``) and GO, then the worker runs ``header`` with the phase's number (its
        stream waits for GO, writes DONE after its work); the parent then writes DONE itself (a worker that never
        did cannot stall the holder) and reads the holder's events. The worker's CPU time comes from the kernel.
        The caller froze or thawed the other side first; ``drain`` is its holder_drain before the phase. Returns
        (the worker's reply, the Phase)."""
        is_ref = worker is self.ref
        side = "ref" if is_ref else "cand"
        if self.replay[side]:  # EvalConfig.cuda_graphs: the spans and stagings the graphs were captured for
            cmd = header.get("cmd")
            if (cmd == "go" and int(header.get("n", -1)) == self.graph_k) or (
                    cmd == "stage" and int(header.get("k", -1)) == self.graph_k * self.graph_spans):
                header = {**header, "replay": True}
        self.seq[side] += 1
        seq = self.seq[side]
        q_spin = statistics.median(self.holder_q) if self.holder_q else 5e-6
        cycles, chain, nominal = hold_plan(hold_s, 0.0, 1.0, self.spin_rate)
        cycles, chain, nominal = hold_plan(hold_s, chain * q_spin, 1.0, self.spin_rate)
        saved = keep_off_cores(self.cpus) if self.spin else None
        try:
            c0 = worker.cpu_seconds()
            t0 = time.perf_counter()
            hh, _ = self._req(self.holder, {"cmd": "hold", "side": side, "seq": seq, "cycles": cycles,
                                            "chain": chain}, timeout=self._left(60), harness=True, hold=False,
                              spin_s=0.01)
            try:
                reply, _ = self._req(worker, {**header, "held": seq}, timeout=timeout, harness=is_ref, hold=False,
                                     spin_s=(3 * (expect_s + nominal) + 0.005) if self.spin else 0.0)
                wall = time.perf_counter() - t0
                cpu = worker.cpu_seconds() - c0
            finally:
                self.sems.done(side, seq)
        finally:
            restore_affinity(saved)
        empty = header.get("cmd") == "go" and not header.get("n")
        self.last_phase = f"{side}:{'empty' if empty else header.get('cmd')}"
        hm, _ = self._req(self.holder, {"cmd": "held"}, timeout=self._left(60), harness=True, hold=False)
        self.holder_q.append(reply_seconds(hh, "queued_s", 0.0) / chain)
        del self.holder_q[:-64]
        return reply, Phase(wall=wall, hold=float(hm["hold_s"]), work=float(hm["work_s"]), cpu=cpu, nominal=nominal,
                            drain=drain[0], after=drain[1])

    def held_harness(self, worker: WorkerProcess, header: dict, timeout: float, hold_s: float) -> tuple[dict, Phase]:
        """A held harness phase (stage, digest), each side quiesced first; the holder's wait for an idle GPU
        before it (``holder_drain``) is the phase's ``drain`` (held.charges)."""
        kind = str(header.get("cmd"))
        drain = self.holder_drain(worker, kind) if worker is not self.ref else (0.0, "")
        self.hold(worker)
        if worker is self.ref:
            drain = self.holder_drain(worker, kind)
        # Busy-polling after it (as before a span): a worker asleep in its read woke 0.05-0.5 ms late on the VM,
        # past a short staging hold, and host gaps landed on the phase's GPU time (call 4).
        spin = 0.05 if self.spin else 0.0
        # The same quiesce on both sides: without it on the candidate's, its staging holds were 0.2-0.3 ms longer
        # than the reference's (H100, call 2: charged as stretch to honest candidates), its context switch landing
        # in the holder's chain.
        self._quiesce(worker, spin)
        return self.held(worker, header, timeout, hold_s, drain=drain)

    def holder_drain(self, worker: WorkerProcess, kind: str) -> tuple[float, str]:
        """The held clock's check on GPU work left queued: with the candidate frozen, the holder (ours) waits until
        its probe kernel runs at idle latency; its waited seconds (trusted). Before a reference's phase (called
        after the freeze) that is the candidate's leftover work plus a context switch; before a candidate's phase
        (called before the thaw, the candidate frozen since the reference's phase) a switch alone, the baseline
        (held.charges, ``drain``); a candidate still awake then (after its own phase) is frozen first. Returns
        (the wait, the last held phase before it: "ref:digest", ...; held._drain_diffs compares by transition)."""
        cand = self.cand
        if worker is not self.ref and cand is not None and not cand.stopped and cand.alive():
            cand.freeze()
        hq, _ = self._req(self.holder, self._quiesce_header(0.0), timeout=self._left(QUIESCE_LIMIT_S + 60),
                          harness=True, hold=False)
        waited = reply_seconds(hq, "waited_s", 0.0)
        # timing.rounds_raw["drains"] (keep_rounds): before whose phase of which kind, after whose last phase, the
        # wait, the holder's first probe and its number of probes (us): where the drain check's charges come from
        self.drain_log.append([kind, "ref" if worker is self.ref else "cand", self.last_phase, round(waited * 1e6, 1),
                               round(reply_seconds(hq, "first_s", 0.0) * 1e6, 1), int(hq.get("probes") or 0)])
        del self.drain_log[:-2000]
        return waited, self.last_phase

    def note_queue(self, kind: str, worker: WorkerProcess, reply: dict) -> None:
        v = reply.get("queued_s")
        if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0:
            q = self.queue[kind]["ref" if worker is self.ref else "cand"]
            q.append(float(v))
            del q[:-16]

    def holds(self) -> dict[str, float]:
        """Hold seconds per kind of held phase for the next block (both sides alike): hold_factor x the
        host's queueing time, the larger of the two sides' (the candidate's at most 10x the reference's)."""
        out = {}
        for kind, q in self.queue.items():
            # a span at most 2x its unheld parent-clock time: a host that waited on a full launch queue reports
            # the hold itself as its queueing, and each hold then doubled the next (GELU: 450 ms holds, call 3).
            # Staging and digests launch a few kernels per input or output: no cap (call 4: a capped staging hold
            # was outrun by the host, and its gaps landed on the harness's GPU time)
            r = statistics.median(q["ref"]) if q["ref"] else self.queue0[kind]
            if kind == "go" and q["ref"]:
                r = min(r, 2.0 * self.queue0[kind])
            c = statistics.median(q["cand"]) if q["cand"] else r
            out[kind] = HOLD_FACTOR * max(r, min(c, 10 * r))
        return out

    def ref_block_held(self, k: int, spans: int) -> list[float]:
        """ref_block on the held clock: the reference's GPU seconds of ``spans`` held spans of ``k`` calls."""
        return self.block_held(self.ref, k, spans)

    def block_held(self, worker: WorkerProcess, k: int, spans: int) -> list[float]:
        """One side alone on the held clock (the other idle or frozen): its GPU seconds of ``spans`` held spans of
        ``k`` calls, replayed when the side replays and ``k`` and ``spans`` are its graphs'. The candidate's is only
        a choice between its own two clocks (calibrate.capture_candidate); its timed blocks are checked as ever."""
        tmo = self._left(self.cfg.max_wall_s)
        hold = self.holds()
        hs, _ = self.held_harness(worker, {"cmd": "stage", "seed": self.rng.randrange(2**31), "k": k * spans},
                                  tmo, hold["stage"])
        self.note_queue("stage", worker, hs)
        out, full = [], False
        for _ in range(spans):
            _, _, reply = self.go(worker, k, tmo, self.queue0["go"], hold_s=hold["go"])
            self.note_queue("go", worker, reply)
            out.append(reply["phase"].work)
            # queueing as long as the hold: the launch queue filled and the host waited for the GPU (see calibrate)
            full |= reply_seconds(reply, "queued_s", 0.0) >= 0.9 * reply["phase"].nominal
        if worker is self.ref:
            self.queue_full = full
        hd, _ = self.held_harness(worker, {"cmd": "digest", "dseed": self.rng.randrange(2**40), "calls": []}, tmo,
                                  hold["digest"])
        self.note_queue("digest", worker, hd)
        return out
