"""A candidate that keeps the evaluator's uid (no root, so no fresh uid) cannot read the evaluating process's
environment through /proc: the sandbox makes that process non-dumpable before it starts such a candidate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLANT = "planted-store-password-7f3a"

SCRIPT = r'''
import ctypes, os, subprocess, sys
from pathlib import Path
import kernelrl.evaluation.sandbox as sb

libc = ctypes.CDLL(None, use_errno=True)
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
READ = ("import os,sys\ntry:\n print(open(f'/proc/{os.getppid()}/environ','rb').read().decode(errors='replace'))\n"
        "except OSError as e:\n print('DENIED', type(e).__name__)")

def probe():  # what a same-uid candidate sees of its parent's environment
    return subprocess.run(["/usr/bin/python3", "-c", READ], capture_output=True, text=True, env={}).stdout

if sys.argv[1] == "worker":
    # the real code path: a candidate worker started without privilege drop hides our environ first
    assert libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1
    w = sb.WorkerProcess("cand", device="cpu", cache_dir=Path(sys.argv[2]), mem_limit_mb=None,
                         drop_privileges=False)
    try:
        print("DUMPABLE", libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
    finally:
        w.close()
else:
    # the kernel's side, as an unprivileged uid (root may read anything): readable, then hidden
    os.setgid(65534); os.setuid(65534)
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # setuid() cleared it; start from an ordinary process
    print("BEFORE", probe())
    print("HIDDEN", sb.hide_own_environ())
    print("AFTER", probe())
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to an unprivileged uid to play the candidate")
def test_same_uid_candidate_cannot_read_the_evaluator_environ(tmp_path):
    env = dict(os.environ, KERNELRL_STORE_URL=f"postgresql+psycopg2://u:{PLANT}@127.0.0.1/db", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SCRIPT, "uid"], capture_output=True, text=True, env=env, cwd="/",
                       timeout=120)
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.split("HIDDEN", 1)
    assert PLANT in before  # the control: an ordinary same-uid process can read it
    assert after.startswith(" True") and "DENIED PermissionError" in after and PLANT not in after


def test_candidate_worker_without_privilege_drop_hides_the_environ(tmp_path):
    r = subprocess.run([sys.executable, "-c", SCRIPT, "worker", str(tmp_path / "cache")], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "DUMPABLE 0" in r.stdout


def test_scratch_of_a_killed_evaluator_is_reaped(tmp_path):
    """Scratch dirs carry their evaluator's pid; those of a dead pid go, those of live ones (ours, pid 1) stay."""
    from kernelrl.evaluation.sandbox import reap_stale_scratch

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    names = {f"kernelrl-cand-{dead.pid}-abc": False, f"kernelrl-eval-{dead.pid}-def": False,
             f"kernelrl-ref-{os.getpid()}-ghi": True, "kernelrl-trial-1-jkl": True, "kernelrl-compile-cache": True,
             f"other-{dead.pid}-x": True}
    for n in names:
        (tmp_path / n / "sub").mkdir(parents=True)
        (tmp_path / n / "sub" / "f").write_text("x")
    removed = reap_stale_scratch(str(tmp_path))
    assert sorted(removed) == sorted(n for n, keep in names.items() if not keep)
    assert {p.name for p in tmp_path.iterdir()} == {n for n, keep in names.items() if keep}


def _fake_topology(root, siblings: dict[int, str]) -> str:
    for cpu, text in siblings.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")
    return str(root)


def test_gpu_timing_cores_take_both_threads_of_one_physical_core_and_leave_nothing_beside_them(tmp_path):
    """With SMT (16 vCPUs as 8 cores x 2, siblings n and n+8, as on the H100 VM) each GPU's timing set is one
    physical core's two threads, so no busy-poll of the parent or the holder runs on a sibling of a timed worker;
    without SMT (or sysfs) the two top cores, as before; too few cores: none."""
    from kernelrl.evaluation.placement import _gpu_timing_sets, _siblings

    smt = _fake_topology(tmp_path / "smt", {c: f"{c % 8},{c % 8 + 8}" for c in range(16)})
    assert _siblings(3, smt) == {3, 11}
    sets = _gpu_timing_sets(list(range(16)), 2, smt)
    assert sets == [{7, 15}, {6, 14}]
    flat = _fake_topology(tmp_path / "flat", {c: str(c) for c in range(16)})
    assert _gpu_timing_sets(list(range(16)), 2, flat) == [{14, 15}, {12, 13}]
    assert _gpu_timing_sets(list(range(16)), 1, str(tmp_path / "none")) == [{14, 15}]
    ranged = _fake_topology(tmp_path / "ranged", {c: f"{c - c % 2}-{c - c % 2 + 1}" for c in range(8)})
    assert _gpu_timing_sets(list(range(8)), 1, ranged) == [{6, 7}]
    # an affinity mask holding one thread of a pair only: that core is not used for timing
    assert _gpu_timing_sets([0, 1, 2, 3, 8, 9, 10, 11, 15], 1, smt) == [{3, 11}]
    assert _gpu_timing_sets([0, 1, 2], 1, smt) == []
