# kernelrl-seed
# expect: slower
# device: any
# technique: im2col, gemm
# why: both 3x3 convs as explicit im2col (F.unfold) plus a GEMM, and the 1x1 head on the full map: correct, memory-bound and slower.
import torch
import torch.nn as nn
import torch.nn.functional as F


def _conv3x3(x, conv):
    b, _, h, w = x.shape
    cols = F.unfold(x, 3, padding=1)  # (b, c*9, h*w)
    y = torch.matmul(conv.weight.view(conv.out_channels, -1), cols) + conv.bias.view(1, -1, 1)
    return y.view(b, -1, h, w)


class ModelNew(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.classifier = nn.Conv2d(64, num_classes, kernel_size=1)

    def forward(self, x):
        x = self.pool(torch.relu(_conv3x3(x, self.conv1)))
        x = self.pool(torch.relu(_conv3x3(x, self.conv2)))
        y = torch.einsum("oc,bchw->bohw", self.classifier.weight.view(self.classifier.out_channels, -1), x)
        y = y + self.classifier.bias.view(1, -1, 1, 1)
        return y.mean(dim=(2, 3))
