# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, reorder, layout, channels-last, in-place
# why: NHWC (channels_last) convs and pools are much faster in oneDNN; ReLU commutes with max-pool (4x fewer pixels, in place); the 1x1 head commutes with the mean (pool first, one small GEMM).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.classifier = nn.Conv2d(64, num_classes, kernel_size=1)

    def forward(self, x):
        x = x.contiguous(memory_format=torch.channels_last)
        x = F.max_pool2d(self.conv1(x), 2).relu_()
        x = F.max_pool2d(self.conv2(x), 2).relu_()
        feats = x.mean(dim=(2, 3))
        w = self.classifier.weight.view(self.classifier.out_channels, -1)
        return torch.addmm(self.classifier.bias, feats, w.t())
