# kernelrl-seed
# expect: faster
# device: cuda
# technique: custom-cuda, fusion, in-place
# why: cuDNN conv (with its bias), then one CUDA kernel applies y*scale + bias[c] and ReLU in place: two launches instead of four.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

// y: (N, C, H, W) contiguous; y = relu(y * scale + bias[c]) in place
__global__ void scale_bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, float scale,
                                       int64_t total, int64_t hw, int64_t channels) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (i / hw) % channels;
        float v = fmaf(y[i], scale, bias[c]);
        y[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor scale_bias_relu_(torch::Tensor y, torch::Tensor bias, double scale) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(y.dim() == 4 && y.is_contiguous(), "y must be a contiguous NCHW tensor");
    auto bc = bias.contiguous();
    TORCH_CHECK(bc.numel() == y.size(1), "bias must have one value per channel");
    int64_t total = y.numel();
    int64_t hw = y.size(2) * y.size(3);
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    scale_bias_relu_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bc.data_ptr<float>(), (float)scale, total, hw, y.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kernelrl_seed_scale_bias_relu",
                   cpp_sources="torch::Tensor scale_bias_relu_(torch::Tensor y, torch::Tensor bias, double scale);",
                   cuda_sources=_cuda_src, functions=["scale_bias_relu_"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        y = self.conv(x).contiguous()
        return _ext.scale_bias_relu_(y, self.bias, float(self.scale))
