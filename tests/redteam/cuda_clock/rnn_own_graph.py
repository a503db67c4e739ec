"""Legit, for builtin/L3/03_LSTM: the reference's own stepped LSTMCell loop, run through the candidate's OWN CUDA
graph (static input buffer, copy in, replay, copy out). It cannot be captured inside the evaluator's graph (a graph
launch inside a capture), so it is timed eagerly. The same work as the reference: against the reference on its
better clock (graph replay) it is worth about 1.0x. Before evaluator version 13 the refusal put the reference on
its eager clock too, and this candidate was paid the reference's launch overhead (issue 32: 2.6-3.3x for the same
pattern around a cuDNN LSTM)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_classes):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.LSTMCell(input_size, hidden_size)
        self.fc = nn.Linear(hidden_size, num_classes)
        self._graph, self._key = None, None

    def _run(self, x):
        b, t, _ = x.shape
        h = x.new_zeros(b, self.hidden_size)
        c = x.new_zeros(b, self.hidden_size)
        for step in range(t):
            h, c = self.cell(x[:, step], (h, c))
        return self.fc(h)

    def forward(self, x):
        if not x.is_cuda:
            return self._run(x)
        key = (tuple(x.shape), x.dtype, x.device)
        if self._key != key:
            self._static_in = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._run(self._static_in)
            torch.cuda.current_stream().wait_stream(side)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._static_out = self._run(self._static_in)
            self._key = key
        self._static_in.copy_(x)
        self._graph.replay()
        return self._static_out.clone()
