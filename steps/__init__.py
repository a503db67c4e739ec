"""Containerised steps: one thin entrypoint per stage (``python -m steps.<stage>``); the contract they share is
kernelrl/step.py."""
