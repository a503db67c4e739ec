"""Legit, for builtin/L3/02_SmallCNN: cudnn.benchmark (autotuned convolution algorithms) and channels_last memory
format, the everyday way to speed up a CNN on a GPU. The autotuning runs in the first calls (outside the clock
after the warm-up); the outputs are the same convolutions' within tolerance. Expected: correct, scored, no fatal
flag (the global flag is set in the candidate's own process only)."""
import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True


class ModelNew(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.classifier = nn.Conv2d(64, num_classes, kernel_size=1)
        # weights in NHWC from the start: moving to the GPU and loading a state dict keep the layout
        self.to(memory_format=torch.channels_last)

    def forward(self, x):
        x = x.contiguous(memory_format=torch.channels_last)
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = self.classifier(x)
        return x.mean(dim=(2, 3))
