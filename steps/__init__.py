"""Containerised steps: one thin entrypoint per stage (``python -m steps.<stage>``); see steps/common.py."""
