"""Which compute device a command means, checked against what this machine has (one rule for every command).

    resolve_device("auto")    -> "cuda:0" when a GPU is visible, else "cpu"
    resolve_device("cuda")    -> "cuda:0"   (always an explicit index: workers pin it with set_device)
    resolve_device("cuda:7")  -> ConfigError "--device cuda:7: this machine has 1 CUDA device (devices: cpu, cuda:0)"

A device that does not exist is the caller's mistake, not a crash: one line, exit 2 through the CLI.
"""

from __future__ import annotations

import ctypes
import re
import sys

from kernelrl.errors import ConfigError


def cuda_device_count() -> int:
    """How many CUDA devices this process can use (CUDA_VISIBLE_DEVICES applied; 0 without a driver).

    Asked of torch once it is imported; before that, of the driver itself (libcuda's cuInit and cuDeviceGetCount,
    the call torch's count ends in), so a command can name its device and start its evaluator workers while it
    imports torch, instead of after (torch's import is 3-4 s of the cold ``kernelrl eval`` on a GPU host)."""
    if "torch" not in sys.modules:
        n = _driver_count()
        if n is not None:
            return n
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver counts as no GPU
        return 0


def _driver_count() -> int | None:
    """The CUDA driver's device count, or 0 where there is no driver; None when the driver cannot be asked
    (the caller then asks torch)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:  # no NVIDIA driver on this machine: torch would find no device either
        return 0
    try:
        n = ctypes.c_int(0)
        if lib.cuInit(0) != 0:  # e.g. CUDA_ERROR_NO_DEVICE: nothing visible
            return 0
        return n.value if lib.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0
    except (AttributeError, OSError):
        return None


def device_name(device: str) -> str:
    """What a result's ``device_type`` says, and what the store's cache, exemplar pools and re-verification match
    on: "cpu", or the CUDA device's name ("NVIDIA H100 80GB HBM3"). Asked of
    torch once it is imported; before that, of the driver (cuDeviceGetName, the name torch reports), so a command
    can answer a candidate that does not compile without importing torch (config/devices's rule above)."""
    if not device.startswith("cuda"):
        return "cpu"
    idx = int(device.split(":")[1]) if ":" in device else 0
    if "torch" not in sys.modules:
        name = _driver_name(idx)
        if name:
            return name
    import torch

    return torch.cuda.get_device_name(idx)


def _driver_name(idx: int) -> str | None:
    """The driver's name for visible device ``idx``; None when the driver cannot say."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        dev, buf = ctypes.c_int(0), ctypes.create_string_buffer(256)
        if lib.cuInit(0) != 0 or lib.cuDeviceGet(ctypes.byref(dev), idx) != 0:
            return None
        if lib.cuDeviceGetName(buf, len(buf), dev) != 0:
            return None
        return buf.value.decode(errors="replace") or None
    except (AttributeError, OSError):
        return None


def available_devices() -> list[str]:
    """``["cpu", "cuda:0", ...]``: what this process can use."""
    return ["cpu"] + [f"cuda:{i}" for i in range(cuda_device_count())]


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
