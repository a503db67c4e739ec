"""Changes global torch flags (threads, TF32, cuDNN) hoping to slow the reference or loosen precision."""
import torch
import torch.nn as nn

torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
