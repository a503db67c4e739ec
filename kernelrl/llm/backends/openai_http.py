"""OpenAI-compatible chat-completions client (OpenAI, DeepSeek, vLLM's server, Ollama, llama.cpp, ...).

    b = OpenAIBackend("https://api.deepseek.com/v1", "deepseek-chat", api_key=..., timeout_s=300,
                      max_retries=5, concurrency=8)
    gens = b.generate([messages] * 4, n=2, max_tokens=4096, temperature=0.8)

- One POST ``{base_url}/chat/completions`` per prompt with ``n``; a server that returns fewer choices than
  asked (many ignore ``n``) is asked again for the rest, one request per missing sample.
- Retries with exponential backoff and jitter on timeouts, connection errors, 408/409/429 and 5xx (a
  ``Retry-After`` header is honoured, capped), and on bodies that are not the expected JSON (truncated or
  garbage). Other 4xx (bad key, context too long) are not retried.
- A request that still fails yields Generations with ``error`` set: the batch always completes.
- ``concurrency`` requests at most in flight (a semaphore over a thread pool).
- Token counts come from the response's ``usage``; with n > 1 choices the completion tokens are split across
  them in proportion to their text length (an estimate; the sum is exact).
- The API key is sent as a bearer token only; it is never logged or shown in ``repr``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from kernelrl.llm.backends.base import Backend, Generation, price_for

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529}


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


class _Fatal(Exception):
    pass


class OpenAIBackend(Backend):
    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, timeout_s: float = 600.0,
                 max_retries: int = 5, concurrency: int = 8, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 price_per_mtok: tuple[float, float] | None = None, extra_body: dict[str, Any] | None = None,
                 connect_timeout_s: float = 10.0):
        super().__init__()
        if not model:
            from kernelrl.errors import ConfigError

            raise ConfigError(f"--llm {base_url}: name the model as URL#MODEL (e.g. {base_url}#deepseek-chat)")
        self.base_url = base_url.rstrip("/")
        self.model_name = model
        self.name = f"{self.base_url}#{model}"
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.concurrency = max(1, int(concurrency))
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key
        self._price = price_for(model, price_per_mtok)
        self._sem = threading.BoundedSemaphore(self.concurrency)
        self._in_flight = 0
        self.max_in_flight = 0  # the most requests seen in flight at once (checks the concurrency limit)
        self._flight_lock = threading.Lock()
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s, connect=min(connect_timeout_s, self.timeout_s)),
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
        )

    def __repr__(self) -> str:
        return (f"OpenAIBackend({self.base_url!r}, model={self.model_name!r}, "
                f"api_key={'***' if self._api_key else None})")

    def close(self) -> None:
        self._client.close()

    def check(self, timeout_s: float = 15.0) -> None:
        """One ``GET /models`` before any work: no connection (a wrong host or port, a server not started) or
        HTTP 401/403 is a ``ConfigError``. Anything else (200, a server without /models, a 5xx the retries may
        get past) lets the run start: a search against an unreachable URL made five retries per prompt and then
        reported 'no verified candidate yet' with exit 0 (issue 33)."""
        from kernelrl.errors import ConfigError

        try:
            r = self._client.get(f"{self.base_url}/models", timeout=min(timeout_s, self.timeout_s))
        except httpx.TimeoutException:
            raise ConfigError(f"--llm {self.name}: {self.base_url} did not answer within "
                              f"{min(timeout_s, self.timeout_s):g} s") from None
        except httpx.TransportError as e:
            raise ConfigError(f"--llm {self.name}: cannot reach {self.base_url} "
                              f"({type(e).__name__}: {str(e)[:200] or 'no answer'})") from None
        if r.status_code in (401, 403):
            raise ConfigError(f"--llm {self.name}: {self.base_url} refused the request (HTTP {r.status_code}; "
                              "is KERNELRL_LLM_API_KEY set and valid?)")

    # -- one request ------------------------------------------------------------------------------------------------
    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._flight_lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            try:
                r = self._client.post(f"{self.base_url}/chat/completions", json=body)
            except httpx.TimeoutException:
                raise _Retryable(f"timeout after {self.timeout_s:g}s") from None
            except httpx.TransportError as e:
                raise _Retryable(f"connection error: {type(e).__name__}: {str(e)[:200]}") from None
        finally:
            with self._flight_lock:
                self._in_flight -= 1
        if r.status_code in RETRY_STATUS:
            ra = r.headers.get("retry-after")
            try:
                retry_after = float(ra) if ra is not None else None
            except ValueError:
                retry_after = None
            raise _Retryable(f"HTTP {r.status_code}: {_snippet(r.text)}", retry_after)
        if r.status_code >= 400:
            raise _Fatal(f"HTTP {r.status_code}: {_snippet(r.text)}")
        try:
            data = r.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            raise _Retryable(f"response is not valid JSON ({len(r.content)} bytes: {_snippet(r.text)})") from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            if isinstance(data, dict) and "error" in data:
                raise _Retryable(f"server error: {_snippet(json.dumps(data['error']))}")
            raise _Retryable(f"unexpected response shape: {_snippet(json.dumps(data))}")
        return data

    def _request(self, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None, int]:
        """(data, error, retries used)."""
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            try:
                with self._sem:
                    return self._post(body), None, attempt
            except _Fatal as e:
                return None, str(e), attempt
            except _Retryable as e:
                last = str(e)
                if attempt == self.max_retries:
                    break
                delay = min(self.max_backoff_s, self.backoff_s * (2 ** attempt)) * (0.5 + random.random() / 2)
                if e.retry_after is not None:
                    delay = min(self.max_backoff_s, max(delay, e.retry_after))
                log.warning("LLM request to %s failed (%s); retry %d/%d in %.1fs", self.base_url, last, attempt + 1,
                            self.max_retries, delay)
                time.sleep(delay)
        return None, f"failed after {self.max_retries + 1} attempts: {last}", self.max_retries

    def _one_prompt(self, messages: list[dict], n: int, params: dict[str, Any], seed: int | None) -> list[Generation]:
        gens: list[Generation] = []
        asked_n = n
        for _ in range(n):  # at most n requests: each returns >= 1 choice or fails
            want = n - len(gens)
            if want <= 0:
                break
            body = {"model": self.model_name, "messages": messages, **params, **self.extra_body}
            if seed is not None:  # a follow-up request for missing samples must not repeat the first one
                body["seed"] = int(seed) + 7919 * len(gens)
            if asked_n > 1:
                body["n"] = want
            t0 = time.monotonic()
            data, err, retries = self._request(body)
            dt = time.monotonic() - t0
            if data is None:
                self._account(failures=1, retries=retries, generations=want, failed_generations=want)
                gens.extend(self.failed(want, err or "request failed", dt))
                break
            new = _choices(data, want, dt)
            if not new:
                self._account(requests=1, failures=1, retries=retries, generations=want, failed_generations=want)
                gens.extend(self.failed(want, f"response has no choices: {_snippet(json.dumps(data))}", dt))
                break
            usage = data.get("usage") or {}
            pt = _int(usage.get("prompt_tokens"))
            ct = _int(usage.get("completion_tokens"))
            _split_tokens(new, pt, ct)
            self._account(requests=1, retries=retries, prompt_tokens=pt, completion_tokens=ct, generations=len(new),
                          failed_generations=sum(1 for g in new if g.error))
            gens.extend(new)
            if len(new) < want and asked_n > 1:
                asked_n = 1  # the server ignores n: ask for the rest one at a time
        return gens[:n]

    def generate(self, prompts, n=1, *, max_tokens=4096, temperature=1.0, top_p=1.0, seed=None, stop=None):
        # (4096 by default: API models write whole files; a caller that forgets max_tokens gets complete kernels)
        params: dict[str, Any] = {"max_tokens": int(max_tokens), "temperature": float(temperature)}
        if top_p != 1.0:
            params["top_p"] = float(top_p)
        if stop:
            params["stop"] = list(stop)
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            futures = [pool.submit(self._one_prompt, m, n, params, None if seed is None else int(seed) + k)
                       for k, m in enumerate(prompts)]
            out = []
            for f in futures:
                try:
                    out.append(f.result())
                except Exception as e:  # a bug in one request must not lose the batch
                    out.append(self.failed(n, f"client error: {type(e).__name__}: {e}"))
            return out


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text[:limit] + ("..." if len(text) > limit else "")


def _int(v: Any) -> int:
    try:
        return max(0, int(v))
    except (TypeError, ValueError):
        return 0


def _choices(data: dict[str, Any], want: int, latency_s: float) -> list[Generation]:
    out = []
    for c in data.get("choices", [])[:want]:
        if not isinstance(c, dict):
            out.append(Generation("", finish_reason="error", latency_s=latency_s, error="malformed choice"))
            continue
        msg = c.get("message") if isinstance(c.get("message"), dict) else {}
        content = msg.get("content")
        if content is None and isinstance(c.get("text"), str):  # completions-style servers
            content = c["text"]
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            out.append(Generation("", finish_reason=c.get("finish_reason") or "error", latency_s=latency_s,
                                  error="choice has no text content"))
            continue
        out.append(Generation(content, finish_reason=c.get("finish_reason"), latency_s=latency_s))
    return out


def _split_tokens(gens: list[Generation], prompt_tokens: int, completion_tokens: int) -> None:
    """Every choice shares the prompt; completion tokens are split by text length (largest remainder)."""
    for g in gens:
        g.prompt_tokens = prompt_tokens
    weights = [len(g.text) for g in gens]
    if not sum(weights):
        weights = [1] * len(gens)
    total = sum(weights)
    exact = [completion_tokens * w / total for w in weights]
    alloc = [int(x) for x in exact]
    for i in sorted(range(len(gens)), key=lambda i: alloc[i] - exact[i])[:completion_tokens - sum(alloc)]:
        alloc[i] += 1
    for g, a in zip(gens, alloc):
        g.completion_tokens = a
