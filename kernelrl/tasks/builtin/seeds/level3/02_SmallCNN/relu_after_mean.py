# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, reorder, layout, bug
# why: also moves the second ReLU past the global mean, but ReLU does not commute with averaging.
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
        feats = F.max_pool2d(self.conv2(x), 2).mean(dim=(2, 3)).relu_()
        w = self.classifier.weight.view(self.classifier.out_channels, -1)
        return torch.addmm(self.classifier.bias, feats, w.t())
