"""kernelrl: contrastive reinforcement learning that teaches an LLM to write faster GPU kernels."""

__version__ = "0.1.0"
