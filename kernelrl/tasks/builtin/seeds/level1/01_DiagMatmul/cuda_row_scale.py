# kernelrl-seed
# expect: faster
# device: cuda
# technique: custom-cuda, algebraic
# why: a CUDA kernel that writes out[i, j] = A[i] * B[i, j], skipping the dense N^3 matmul.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void diag_scale_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ out, int64_t rows, int64_t cols) {
    int64_t row = blockIdx.y;
    float s = a[row];
    const float* brow = b + row * cols;
    float* orow = out + row * cols;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += (int64_t)gridDim.x * blockDim.x) {
        orow[j] = s * brow[j];
    }
}

torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(b.dim() == 2 && a.dim() == 1 && a.size(0) == b.size(0), "shape mismatch");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(bc);
    int64_t rows = bc.size(0), cols = bc.size(1);
    const int threads = 256;
    int64_t bx = (cols + threads - 1) / threads;
    if (bx > 65535) bx = 65535;
    dim3 grid((unsigned)bx, (unsigned)rows);
    diag_scale_kernel<<<grid, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_cpp_src = "torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b);"

_ext = load_inline(name="kernelrl_seed_diag_scale", cpp_sources=_cpp_src, cuda_sources=_cuda_src,
                   functions=["diag_scale"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.diag_scale(A, B)
