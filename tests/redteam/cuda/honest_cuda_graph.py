"""Legitimate: replays a captured CUDA graph of the same computation (must pass with no fatal flag)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = None

    def forward(self, x):
        if self.graph is None or self.static_in.shape != x.shape:
            self.static_in = x.clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.static_out = torch.softmax(self.static_in, dim=1)
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = torch.softmax(self.static_in, dim=1)
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()
