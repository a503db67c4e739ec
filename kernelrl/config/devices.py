"""Which compute device a command means, checked against what this machine has (one rule for every command).

    resolve_device("auto")    -> "cuda:0" when a GPU is visible, else "cpu"
    resolve_device("cuda")    -> "cuda:0"   (always an explicit index: workers pin it with set_device)
    resolve_device("cuda:7")  -> ConfigError "--device cuda:7: this machine has 1 CUDA device (devices: cpu, cuda:0)"

A device that does not exist is the caller's mistake, not a crash: one line, exit 2 through the CLI.
"""

from __future__ import annotations

import re

from kernelrl.errors import ConfigError


def available_devices() -> list[str]:
    """``["cpu", "cuda:0", ...]``: what this process can use (torch imported lazily)."""
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver counts as no GPU
        n = 0
    return ["cpu"] + [f"cuda:{i}" for i in range(n)]


def resolve_device(device: str, flag: str = "--device") -> str:
    device = (device or "").strip().lower()
    if device == "cpu":
        return "cpu"
    if device == "auto":
        return "cuda:0" if len(available_devices()) > 1 else "cpu"
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    if not m:
        raise ConfigError(f"{flag} must be cpu, cuda, cuda:N or auto, got {device!r}")
    have = available_devices()
    want = f"cuda:{m.group(1) or 0}"
    if want not in have:
        n = len(have) - 1
        what = "no CUDA device" if n == 0 else f"{n} CUDA device{'s' if n > 1 else ''}"
        raise ConfigError(f"{flag} {device}: this machine has {what} (devices: {', '.join(have)})")
    return want
