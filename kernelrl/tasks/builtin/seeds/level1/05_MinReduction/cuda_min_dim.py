# kernelrl-seed
# expect: faster
# device: cuda
# technique: custom-cuda, avoid-redundant-work
# why: a CUDA kernel for min over the middle dim of (B, R, C): coalesced reads, the reduced dim split over 16 threads and combined in shared memory, no indices.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

// x viewed as (outer, r, inner): out[o, i] = min_k x[o, k, i].
// Block (32, RY): threadIdx.x walks inner (coalesced), threadIdx.y splits the reduced dim; then a shared-memory
// reduction over y. Grid: (ceil(inner / 32), outer).
constexpr int RY = 16;

__global__ void min_mid_kernel(const float* __restrict__ x, float* __restrict__ out,
                               int64_t outer, int64_t r, int64_t inner) {
    __shared__ float partial[RY][32];
    int64_t o = blockIdx.y;
    int64_t i = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float m = INFINITY;
    if (i < inner) {
        const float* p = x + o * r * inner + i;
        for (int64_t k = threadIdx.y; k < r; k += RY) {
            m = fminf(m, p[k * inner]);
        }
    }
    partial[threadIdx.y][threadIdx.x] = m;
    __syncthreads();
    for (int s = RY / 2; s > 0; s >>= 1) {
        if (threadIdx.y < s) {
            partial[threadIdx.y][threadIdx.x] = fminf(partial[threadIdx.y][threadIdx.x], partial[threadIdx.y + s][threadIdx.x]);
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && i < inner) out[o * inner + i] = partial[0][threadIdx.x];
}

torch::Tensor min_dim(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
    if (dim < 0) dim += x.dim();
    TORCH_CHECK(dim >= 0 && dim < x.dim() && x.size(dim) > 0, "bad dim");
    auto xc = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
    int64_t r = xc.size(dim);
    std::vector<int64_t> shape;
    for (int64_t d = 0; d < xc.dim(); ++d) if (d != dim) shape.push_back(xc.size(d));
    auto out = torch::empty(shape, xc.options());
    TORCH_CHECK(outer <= 65535, "outer size too large for gridDim.y");
    dim3 block(32, RY);
    dim3 grid((unsigned)((inner + 31) / 32), (unsigned)outer);
    min_mid_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), outer, r, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kernelrl_seed_min_dim", cpp_sources="torch::Tensor min_dim(torch::Tensor x, int64_t dim);",
                   cuda_sources=_cuda_src, functions=["min_dim"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.min_dim(x, self.dim)
