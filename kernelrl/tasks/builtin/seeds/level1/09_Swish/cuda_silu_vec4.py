# kernelrl-seed
# expect: faster
# device: cuda
# technique: custom-cuda, fusion, vectorized
# why: one CUDA kernel computes x * sigmoid(x) with float4 loads and stores (scalar kernel for unaligned input): one read, one write, one launch.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

__global__ void silu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = silu(v.x); v.y = silu(v.y); v.z = silu(v.z); v.w = silu(v.w);
        y[i] = v;
    }
}

__global__ void silu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        y[i] = silu(x[i]);
    }
}

torch::Tensor silu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    if (n == 0) return y;
    auto stream = c10::cuda::getCurrentCUDAStream();
    const int threads = 256;
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    bool aligned = (reinterpret_cast<uintptr_t>(xp) % 16 == 0) && (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
    int64_t done = 0;
    if (aligned) {
        int64_t n4 = n / 4;
        if (n4 > 0) {
            int64_t blocks = (n4 + threads - 1) / threads;
            if (blocks > 65535) blocks = 65535;
            silu_vec4_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
                reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        done = n4 * 4;
    }
    if (done < n) {  // the tail (or everything, for an unaligned pointer)
        int64_t rest = n - done;
        int64_t blocks = (rest + threads - 1) / threads;
        if (blocks > 65535) blocks = 65535;
        silu_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(xp, yp, done, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(name="kernelrl_seed_silu_vec4", cpp_sources="torch::Tensor silu_forward(torch::Tensor x);",
                   cuda_sources=_cuda_src, functions=["silu_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.silu_forward(x)
