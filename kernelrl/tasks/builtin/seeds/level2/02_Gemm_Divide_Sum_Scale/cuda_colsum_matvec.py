# kernelrl-seed
# expect: faster
# device: cuda
# technique: custom-cuda, algebraic, matvec
# why: two CUDA kernels: column-sum of W (scaled by s/2), then a warp-per-row dot product with x; no GEMM at all.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

// w: (hidden, input) row-major. colsum[k] = factor * sum_j w[j, k].
// Block (32, 32): threadIdx.x walks k (coalesced), threadIdx.y splits j; shared-memory sum over y.
__global__ void colsum_kernel(const float* __restrict__ w, float* __restrict__ colsum,
                              int64_t hidden, int64_t input, float factor) {
    __shared__ float partial[32][33];
    int64_t k = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (k < input) {
        for (int64_t j = threadIdx.y; j < hidden; j += 32) acc += w[j * input + k];
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int s = 16; s > 0; s >>= 1) {
        if (threadIdx.y < s) partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && k < input) colsum[k] = partial[0][threadIdx.x] * factor;
}

// one warp per batch row: out[b] = sum_k x[b, k] * v[k]
__global__ void rowdot_kernel(const float* __restrict__ x, const float* __restrict__ v,
                              float* __restrict__ out, int64_t batch, int64_t input) {
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= batch) return;
    const float* row = x + warp * input;
    float acc = 0.f;
    for (int64_t k = lane; k < input; k += 32) acc += row[k] * v[k];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffff, acc, off);
    if (lane == 0) out[warp] = acc;
}

torch::Tensor gemm_sum(torch::Tensor x, torch::Tensor w, double scaling) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "shape mismatch");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    int64_t batch = xc.size(0), input = xc.size(1), hidden = wc.size(0);
    auto colsum = torch::empty({input}, xc.options());
    auto out = torch::empty({batch, 1}, xc.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    const int threads = 256;
    colsum_kernel<<<(unsigned)((input + 31) / 32), dim3(32, 32), 0, stream>>>(
        wc.data_ptr<float>(), colsum.data_ptr<float>(), hidden, input, (float)(scaling / 2.0));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    int64_t total_threads = batch * 32;
    rowdot_kernel<<<(unsigned)((total_threads + threads - 1) / threads), threads, 0, stream>>>(
        xc.data_ptr<float>(), colsum.data_ptr<float>(), out.data_ptr<float>(), batch, input);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kernelrl_seed_gemm_sum",
                   cpp_sources="torch::Tensor gemm_sum(torch::Tensor x, torch::Tensor w, double scaling);",
                   cuda_sources=_cuda_src, functions=["gemm_sum"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size) * 0.02)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return _ext.gemm_sum(x, self.weight, float(self.scaling_factor))
