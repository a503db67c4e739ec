# kernelrl-seed
# expect: faster
# device: cuda
# technique: custom-cuda, algebraic, fusion
# why: log(softmax(x / T)) = x/T - logsumexp(x/T): one CUDA block per row does max, sum of exp and the subtraction (one launch, not three).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// block-wide reductions; blockDim.x is a multiple of 32 (at most 1024); red has 32 floats
__device__ float block_max(float v, float* red) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < nw ? red[lane] : -INFINITY;
        v = warp_max(v);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    float r = red[0];
    __syncthreads();  // red is reused by the next reduction
    return r;
}

__device__ float block_sum(float v, float* red) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < nw ? red[lane] : 0.f;
        v = warp_sum(v);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    float r = red[0];
    __syncthreads();
    return r;
}

__global__ void log_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols, float inv_t) {
    __shared__ float red[32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j] * inv_t);
    m = block_max(m, red);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] * inv_t - m);
    s = block_sum(s, red);
    float lse = m + logf(s);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] * inv_t - lse;
}

torch::Tensor scaled_log_softmax(torch::Tensor x, double temperature) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "need a non-empty last dimension");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t cols = xc.size(-1);
    int64_t rows = xc.numel() / cols;
    TORCH_CHECK(rows <= 2147483647LL, "too many rows");
    if (rows == 0) return y;
    const int threads = 256;
    log_softmax_kernel<<<(unsigned)rows, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), cols, (float)(1.0 / temperature));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kernelrl_seed_scaled_log_softmax",
                   cpp_sources="torch::Tensor scaled_log_softmax(torch::Tensor x, double temperature);",
                   cuda_sources=_cuda_src, functions=["scaled_log_softmax"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return _ext.scaled_log_softmax(x, float(self.temperature))
