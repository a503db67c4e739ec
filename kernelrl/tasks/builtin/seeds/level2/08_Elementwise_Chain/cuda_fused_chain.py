# kernelrl-seed
# expect: faster
# device: cuda
# technique: custom-cuda, algebraic, fusion
# why: one CUDA kernel computes sigmoid(max(x, 0) + bias[c]) per element: one read, one write, no intermediates.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_bias_sigmoid_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                         float* __restrict__ y, int64_t total, int64_t hw, int64_t channels) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (i / hw) % channels;
        float v = fmaxf(x[i], 0.f) + bias[c];
        y[i] = 1.f / (1.f + __expf(-v));
    }
}

torch::Tensor relu_bias_sigmoid(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(x.dim() == 4, "x must be NCHW");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    TORCH_CHECK(bc.numel() == xc.size(1), "bias must have one value per channel");
    auto y = torch::empty_like(xc);
    int64_t total = xc.numel();
    int64_t hw = xc.size(2) * xc.size(3);
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    relu_bias_sigmoid_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), total, hw, xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kernelrl_seed_relu_bias_sigmoid",
                   cpp_sources="torch::Tensor relu_bias_sigmoid(torch::Tensor x, torch::Tensor bias);",
                   cuda_sources=_cuda_src, functions=["relu_bias_sigmoid"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return _ext.relu_bias_sigmoid(x, self.bias)
