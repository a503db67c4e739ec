"""Can a *trusted* process hold the GPU for another process's timed span? (The device clock's hole: its spin runs
in the candidate's process, which can shorten it. Here a holder process of ours runs the spin and records an
interprocess CUDA event after it; the timed worker's stream waits on that event, so the worker queues its calls
while the GPU is held, and its time is taken from the *parent's* clock: span - the holder's measured spin - the
round trip. The worker's own events are recorded only to compare.)

    python bench/held_clock_probe.py --spans 60 --calls 200        # on a GPU machine, as root (uses another uid)
    python bench/held_clock_probe.py --uid 0 --chain 100            # one uid; the hold as 100 short spins

Questions it answers on the device: does the interprocess event work across uids (the candidate's sandbox);
how repeatable is the parent-clock estimate of the worker's device time against its own events; does a worker
that does not wait (it runs during the hold, time-sliced with the holder's spin) show up as a longer hold (one
cycle-counting spin: no, 2026-11-26; ``--chain``: a chain of short spins, whose gaps would show it).
Prints one line per mode and writes every span to --out (JSON lines).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _sem(path: str):
    """A 4 KB file in /dev/shm mapped here and registered with CUDA (mapped, portable): a 32-bit semaphore that a
    stream can write (cuStreamWriteValue32) and another process's stream can wait on (cuStreamWaitValue32), across
    uids (file permissions, not CUDA IPC). Returns (device address, libcuda, keep-alive objects)."""
    import ctypes
    import mmap

    import torch

    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, 4096)
    buf = (ctypes.c_char * 4096).from_buffer(mm)
    addr = ctypes.addressof(buf)
    rc = torch.cuda.cudart().cudaHostRegister(addr, 4096, 0x01 | 0x02)  # portable | mapped
    if int(rc) != 0:
        raise RuntimeError(f"cudaHostRegister: {rc}")
    lib = ctypes.CDLL("libcuda.so.1")
    for name in ("cuStreamWaitValue32_v2", "cuStreamWaitValue32", "cuStreamWriteValue32_v2", "cuStreamWriteValue32"):
        f = getattr(lib, name, None)
        if f is not None:
            f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            f.restype = ctypes.c_int
    wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
    write = getattr(lib, "cuStreamWriteValue32_v2", None) or lib.cuStreamWriteValue32
    return addr, wait, write, (fd, mm, buf)


def child(role: str) -> None:
    import torch

    dev = torch.device("cuda")
    out = sys.stdout
    state: dict = {}

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    for line in sys.stdin:
        h = json.loads(line)
        cmd = h["cmd"]
        if cmd == "init" and h.get("sem"):
            torch.zeros(1, device=dev)  # the context, before the semaphore is registered in it
            state["sem"] = _sem(h["sem"])
            state["seq"] = 0
            state["a"], state["b"] = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if role != "holder":
                x = torch.randn(int(h["k"]), 1024, 2048, device=dev)
                torch.softmax(x[0], dim=1)
                state.update(x=x, e0=torch.cuda.Event(enable_timing=True), e1=torch.cuda.Event(enable_timing=True,
                                                                                               blocking=True))
            torch.cuda._sleep(1000)
            torch.cuda.synchronize()
            reply({"ok": True, "handle": "", "uid": os.getuid()})
        elif cmd == "init" and role == "holder":
            ev = torch.cuda.Event(enable_timing=False, interprocess=True)
            ev.record()
            torch.cuda.synchronize()
            state["ev"], state["a"], state["b"] = ev, torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            torch.cuda._sleep(1000)
            reply({"ok": True, "handle": bytes(ev.ipc_handle()).hex(), "uid": os.getuid()})
        elif cmd == "init":
            ev = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), bytes.fromhex(h["handle"]))
            x = torch.randn(int(h["k"]), 1024, 2048, device=dev)
            torch.softmax(x[0], dim=1)
            torch.cuda.synchronize()
            state.update(ev=ev, x=x, e0=torch.cuda.Event(enable_timing=True), e1=torch.cuda.Event(
                enable_timing=True, blocking=True))
            reply({"ok": True, "uid": os.getuid()})
        elif cmd == "hold":
            a, b = state["a"], state["b"]
            a.record()
            m = int(h.get("chain") or 1)  # a chain of m short spins: another context's time slices show as gaps
            for _ in range(m):
                torch.cuda._sleep(max(1000, int(h["cycles"]) // m))
            b.record()
            if "sem" in state:  # release: the GPU writes the span's number into the shared semaphore
                addr, _, write, _ = state["sem"]
                rc = write(torch.cuda.current_stream().cuda_stream, addr, int(h["seq"]), 0)
                if rc:
                    raise RuntimeError(f"cuStreamWriteValue32: {rc}")
            else:
                state["ev"].record()
            reply({"ok": True})
        elif cmd == "spin":
            state["b"].synchronize()
            reply({"spin_s": state["a"].elapsed_time(state["b"]) / 1e3})
        elif cmd == "go":
            x, e0, e1 = state["x"], state["e0"], state["e1"]
            t0 = time.perf_counter()
            if h["wait"] and "sem" in state:
                addr, wait, _, _ = state["sem"]
                rc = wait(torch.cuda.current_stream().cuda_stream, addr, int(h["seq"]), 0)  # GEQ
                if rc:
                    raise RuntimeError(f"cuStreamWaitValue32: {rc}")
            elif h["wait"]:
                torch.cuda.current_stream().wait_event(state["ev"])
            e0.record()
            for i in range(int(h["n"])):
                torch.softmax(x[i], dim=1)
            e1.record()
            q = time.perf_counter() - t0
            e1.synchronize()
            torch.cuda.synchronize()
            reply({"dev_s": e0.elapsed_time(e1) / 1e3, "queued_s": q})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="")
    ap.add_argument("--spans", type=int, default=60)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--uid", type=int, default=3_123_457, help="the timed worker's uid when run as root")
    ap.add_argument("--out", default="held_clock.jsonl")
    ap.add_argument("--chain", type=int, default=1, help="the hold as a chain of this many short spins")
    ap.add_argument("--sem", action="store_true", help="release through a semaphore in shared host memory "
                    "(cuStreamWriteValue32 / cuStreamWaitValue32) instead of an interprocess event")
    a = ap.parse_args()
    if a.role:
        child(a.role)
        return 0

    def start(role: str, uid: int | None):
        pre = (lambda: os.setuid(uid)) if uid is not None and os.geteuid() == 0 else None
        return subprocess.Popen([sys.executable, __file__, "--role", role], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1, preexec_fn=pre, cwd="/tmp",
                                env={**os.environ, "HOME": "/tmp", "CUDA_CACHE_DISABLE": "1"})

    def ask(p, obj):
        p.stdin.write(json.dumps(obj) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    sem = None
    if a.sem:
        sem = f"/dev/shm/kernelrl-held-{os.getpid()}"
        with open(sem, "wb") as f:
            f.write(b"\0" * 4096)
        os.chmod(sem, 0o666)
    holder = start("holder", None)
    hh = ask(holder, {"cmd": "init", "sem": sem})
    cand = start("cand", a.uid)
    try:
        hc = ask(cand, {"cmd": "init", "handle": hh["handle"], "k": a.calls, "sem": sem})
    except Exception as e:  # noqa: BLE001
        print(f"the timed worker could not open the holder's release ({'semaphore' if sem else 'event'}): {e!r}")
        return 1
    how = "semaphore mapped" if sem else "interprocess event opened"
    print(f"holder uid {hh['uid']}, worker uid {hc['uid']}: {how}")
    rows = []
    out = open(a.out, "w")

    seq = [0]

    def span(n: int, wait: bool, cycles: int) -> dict:
        seq[0] += 1
        t0 = time.perf_counter()
        ask(holder, {"cmd": "hold", "cycles": cycles, "chain": a.chain, "seq": seq[0]})
        t1 = time.perf_counter()
        r = ask(cand, {"cmd": "go", "n": n, "wait": wait, "seq": seq[0]})
        t2 = time.perf_counter()
        s = ask(holder, {"cmd": "spin"})["spin_s"]
        row = {"n": n, "wait": wait, "cycles": cycles, "hold_rt": t1 - t0, "go_wall": t2 - t1, "spin": s, **r}
        out.write(json.dumps(row) + "\n")
        return row

    # the spin's length: 3x the worker's queueing time of its calls, measured unheld first
    q = statistics.median(span(a.calls, False, 1000)["queued_s"] for _ in range(5))
    rate = None
    for _ in range(3):
        r = span(0, True, 2_000_000)
        rate = r["spin"] / 2_000_000
    cycles = int(max(3 * q, 2e-3) / rate)
    for mode, n, wait, m in (("empty", 0, True, 20), ("honest", a.calls, True, a.spans),
                             ("no-wait", a.calls, False, 20), ("honest-again", a.calls, True, a.spans)):
        rs = [span(n, wait, cycles) for _ in range(m)]
        rows.append((mode, rs))
    empty = rows[0][1]
    rt0 = statistics.median(r["go_wall"] + r["hold_rt"] - r["spin"] for r in empty)
    nominal = statistics.median(r["spin"] for r in empty)
    print(f"calls {a.calls}, queueing {q * 1e3:.3f} ms, spin {nominal * 1e3:.3f} ms, round trip {rt0 * 1e6:.1f} us")
    for mode, rs in rows[1:]:
        # the parent's estimate of the work: what the span held beyond the holder's spin and the round trip, plus
        # whatever the holder's spin took beyond its nominal length (GPU time the worker took from it, if it ran
        # during the hold instead of waiting)
        est = [max(r["go_wall"] + r["hold_rt"] - r["spin"] - rt0, 0.0) + (r["spin"] - nominal) for r in rs]
        naive = [r["go_wall"] + r["hold_rt"] - nominal - rt0 for r in rs]
        own = [r["dev_s"] for r in rs]
        spins = [r["spin"] for r in rs]
        med = statistics.median(est)
        rsd = 1.4826 * statistics.median(abs(e - med) for e in est) / med if med > 0 else float("nan")
        print(f"{mode:13s} parent estimate median {med * 1e3:.4f} ms (robust sd {rsd:.4f} rel, "
              f"min {min(est) * 1e3:.4f}, max {max(est) * 1e3:.4f}; span - nominal spin: "
              f"{statistics.median(naive) * 1e3:.4f}), worker's events {statistics.median(own) * 1e3:.4f} ms, "
              f"holder's spin {statistics.median(spins) * 1e3:.3f} ms (max {max(spins) * 1e3:.3f}), queued "
              f"{statistics.median(r['queued_s'] for r in rs) * 1e3:.3f} ms")
    out.close()
    for p in (holder, cand):
        p.kill()
    if sem:
        os.unlink(sem)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
