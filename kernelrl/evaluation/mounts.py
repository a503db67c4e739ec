"""The candidate's own mount namespace, for a root evaluator whose interpreter lives under a private directory
(a pyenv in /root): how an unprivileged candidate uid reaches the interpreter, its stdlib and this package
(``mount_plan``) and, in the forked child, the tmpfs and bind mounts that do it (``apply_mount_plan``). Used by
sandbox.py."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)


def world_reachable(path: str) -> bool:
    """True if an unprivileged uid can traverse to and read/execute ``path``."""
    p = Path(os.path.realpath(path))
    try:
        for parent in [*reversed(p.parents), p]:
            if not os.stat(parent).st_mode & 0o001:
                return False
    except OSError:
        return False
    return True


CLONE_NEWNS = 0x00020000


MS_BIND, MS_REC, MS_PRIVATE, MS_MOVE = 4096, 16384, 1 << 18, 8192


def needed_paths() -> list[str]:
    import sysconfig

    return [os.path.realpath(x) for x in (sys.executable, sys.base_prefix, sysconfig.get_paths()["stdlib"],
                                          sysconfig.get_paths()["purelib"], str(Path(__file__).resolve().parent))]


def mount_plan() -> list[tuple[str, list[str]]] | None:
    """How to make the interpreter reachable for an unprivileged candidate when a private directory (typically
    /root, holding a pyenv) blocks the way: in the candidate's own mount namespace, a tmpfs hides that directory
    (and every secret in it) and only the needed subtrees are bound back. [] when nothing blocks; None when
    a needed subtree itself is private (no plan: the candidate keeps the caller's uid)."""
    plan: dict[str, set[str]] = {}
    for path in needed_paths():
        p = Path(path)
        chain = [*reversed(p.parents), p]
        for i, d in enumerate(chain):
            try:
                mode = os.stat(d).st_mode
            except OSError:
                return None
            if not mode & 0o001:
                if i + 1 >= len(chain) or not all(os.stat(x).st_mode & 0o001 for x in chain[i + 1:]):
                    return None
                plan.setdefault(str(d), set()).add(str(chain[i + 1]))
                break
    return [(d, sorted(subs)) for d, subs in sorted(plan.items())]


def apply_mount_plan(plan: list[tuple[str, list[str]]], stash: Path) -> None:
    """In the (forked, still root) child: a private mount namespace where each blocking directory is a fresh
    world-traversable tmpfs holding bind mounts of only the subtrees the interpreter needs."""
    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise OSError(ctypes.get_errno(), f"sandbox: {what} failed")

    check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    n = 0
    for d, subs in plan:
        stashed = []
        for sub in subs:
            st = stash / f".m{n}"
            n += 1
            check(_libc.mount(sub.encode(), str(st).encode(), None, MS_BIND | MS_REC, None), f"bind {sub}")
            stashed.append((sub, st))
        check(_libc.mount(b"tmpfs", d.encode(), b"tmpfs", 0, b"mode=0755,size=1m"), f"tmpfs on {d}")
        for sub, st in stashed:
            os.makedirs(sub, 0o755, exist_ok=True)
            check(_libc.mount(str(st).encode(), sub.encode(), None, MS_MOVE, None), f"move {sub}")
