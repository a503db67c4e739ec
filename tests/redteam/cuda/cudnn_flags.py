"""Flips every global cuDNN/TF32/precision flag it can (benchmark mode, non-deterministic algorithms, reduced
precision reductions), hoping the reference is affected too or precision loosens. They live in this process
only; the softmax it computes is honest."""
import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
