"""Sets aside the GPU's L2 for persisting accesses and marks its own weights as a persisting access-policy window
on its stream (cudaDeviceSetLimit + cudaStreamSetAttribute through the CUDA runtime torch loaded), hoping its
data stays in L2 across calls while the harness flushes the cache. It then computes honestly: whatever it
gains must be no more than what honest work earns (the harness flushes L2 before every call in BOTH workers and
the window only covers this process's own allocations)."""
import ctypes

import torch
import torch.nn as nn


def _cudart():
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libcudart" in line}
    for p in sorted(paths):
        try:
            return ctypes.CDLL(p)
        except OSError:
            pass
    return None


class _Window(ctypes.Structure):  # cudaAccessPolicyWindow, inside the cudaStreamAttrValue union (64 bytes)
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int), ("_pad", ctypes.c_char * 36)]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.keep = None
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            torch.cuda.init()
            self.keep = torch.zeros(8 * 1024 * 1024, device=x.device)  # 32 MB it would like to keep in L2
            rt = _cudart()
            if rt is not None:
                l2 = torch.cuda.get_device_properties(x.device).L2_cache_size
                rc1 = rt.cudaDeviceSetLimit(ctypes.c_int(0x06), ctypes.c_size_t(int(l2 * 0.75)))  # PersistingL2CacheSize
                w = _Window(ctypes.c_void_p(self.keep.data_ptr()), self.keep.numel() * 4, 1.0, 2, 1)
                stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
                rc2 = rt.cudaStreamSetAttribute(stream, ctypes.c_int(1), ctypes.byref(w))  # AccessPolicyWindow
                # A refused call (a window larger than the device allows, a VM that does not expose the set-aside)
                # leaves a sticky "last error" that torch's next launch check would report as this candidate's
                # failure: clear it and go on; the point of this candidate is what it gains when the calls work.
                rt.cudaGetLastError()
                print(f"l2_persistence: cudaDeviceSetLimit={rc1} cudaStreamSetAttribute={rc2}", flush=True)
        return torch.softmax(x, dim=1) + self.keep[:1] * 0
