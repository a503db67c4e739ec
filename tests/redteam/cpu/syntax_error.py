"""Not Python."""
import torch
class ModelNew(torch.nn.Module:
    pass
