"""A custom CUDA kernel that writes through a bad pointer (illegal memory access)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_src = r"""
#include <torch/extension.h>
__global__ void bad(float* p) { p[(size_t)1 << 40] = 1.0f; }
torch::Tensor run(torch::Tensor x) { bad<<<1, 1>>>(x.data_ptr<float>()); return x; }
"""
_mod = load_inline("kernelrl_redteam_illegal", cpp_sources="torch::Tensor run(torch::Tensor x);",
                   cuda_sources=_src, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.softmax(x, dim=1)
        _mod.run(y)
        return y
