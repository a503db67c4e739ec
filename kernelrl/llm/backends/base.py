"""The one small interface every LLM backend implements, and its token/cost accounting.

    gens = backend.generate([messages_a, messages_b], n=4, max_tokens=2048, temperature=0.8)
    gens[0][3].text, .prompt_tokens, .completion_tokens, .finish_reason, .latency_s, .error
    backend.usage          # totals: requests, tokens, failures, retries, estimated cost
    backend.count_tokens(text)

A request that fails after its retries yields Generations with ``error`` set (``finish_reason="error"``):
recorded by the caller, never raised, so one bad request never loses a batch.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import asdict, dataclass

# USD per million (input, output) tokens, matched by the longest prefix of the model name. Estimates only:
# providers change prices; override with price_per_mtok=(in, out) or KERNELRL_LLM_PRICE_PER_MTOK="in,out".
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "deepseek-chat": (0.27, 1.10),
    "deepseek-reasoner": (0.55, 2.19),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
}


def price_for(model: str, override: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for ``model``; None when unknown (cost is then not estimated)."""
    if override is not None:
        return (float(override[0]), float(override[1]))
    env = os.environ.get("KERNELRL_LLM_PRICE_PER_MTOK")
    if env:
        try:
            a, b = (float(x) for x in env.split(","))
            return (a, b)
        except ValueError:
            pass
    name = model.rsplit("/", 1)[-1].lower()
    keys = [k for k in PRICES_PER_MTOK if name.startswith(k)]
    return PRICES_PER_MTOK[max(keys, key=len)] if keys else None


@dataclass
class Generation:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None  # stop | length | error (| whatever the server says)
    latency_s: float = 0.0
    error: str | None = None  # set when the request failed after retries: recorded, never raised

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Usage:
    requests: int = 0  # requests that got an answer (HTTP) or generate calls (local)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0  # requests that failed after all retries
    cost_usd: float = 0.0  # estimate from the price table; 0 for local models
    retries: int = 0
    generations: int = 0
    failed_generations: int = 0
    cost_known: bool = True  # False when some tokens were billed at an unknown price

    def to_dict(self) -> dict:
        return asdict(self)


class Backend:
    """``generate(batch of chat messages, n) -> per prompt, n Generations``."""

    name: str = "backend"  # what logs and stored attempts call it (spec or model path)
    model_name: str = ""
    context_window: int | None = None

    def __init__(self) -> None:
        self.usage = Usage()
        self._usage_lock = threading.Lock()
        self._price: tuple[float, float] | None = (0.0, 0.0)

    def generate(self, prompts: list[list[dict]], n: int = 1, *, max_tokens: int = 1024, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, stop: list[str] | None = None) -> list[list[Generation]]:
        """Per prompt, n Generations. ``seed``: prompt k is sampled with seed + k, so identical prompts in one
        batch still give different samples (servers that ignore seeds are not reproducible)."""
        raise NotImplementedError

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` (the backend's tokenizer when it has one, else an estimate)."""
        return math.ceil(len(text) / 3.5)

    def check(self) -> None:
        """Raise ``ConfigError`` (one line) when the model cannot be used at all: an endpoint that does not answer
        or refuses the key. Local models are loaded when built, so there is nothing left to check."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _account(self, *, prompt_tokens: int = 0, completion_tokens: int = 0, requests: int = 0, failures: int = 0,
                 retries: int = 0, generations: int = 0, failed_generations: int = 0) -> None:
        with self._usage_lock:
            u = self.usage
            u.requests += requests
            u.prompt_tokens += prompt_tokens
            u.completion_tokens += completion_tokens
            u.failures += failures
            u.retries += retries
            u.generations += generations
            u.failed_generations += failed_generations
            if prompt_tokens or completion_tokens:
                if self._price is None:
                    u.cost_known = False
                else:
                    u.cost_usd += (prompt_tokens * self._price[0] + completion_tokens * self._price[1]) / 1e6

    @staticmethod
    def failed(n: int, reason: str, latency_s: float = 0.0) -> list[Generation]:
        return [Generation(text="", finish_reason="error", latency_s=latency_s, error=reason) for _ in range(n)]


def apply_stop(text: str, stop: list[str] | None) -> tuple[str, bool]:
    """Cut ``text`` at the first stop string: (text, stopped)."""
    if not stop:
        return text, False
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


__all__ = ["Backend", "Generation", "PRICES_PER_MTOK", "Usage", "apply_stop", "price_for"]
