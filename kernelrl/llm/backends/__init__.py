"""LLM backends behind one interface: OpenAI-compatible HTTP, vLLM offline, local transformers.

``make_backend(spec, **kw)``:
- ``http(s)://host[:port]/v1#model`` -> :class:`OpenAIBackend` (API key: ``api_key=`` or ``KERNELRL_LLM_API_KEY``
  / settings ``llm_api_key``; never logged). Without ``#model``: settings ``llm_model``.
- ``vllm:PATH_OR_ID`` -> :class:`VLLMBackend` (vLLM offline engine; imported lazily).
- ``tiny`` -> the locally built tiny test model (``kernelrl.llm.tiny``) on transformers.
- anything else (a local path or an HF id) -> :class:`HFBackend`.

Keyword arguments a backend does not take are ignored (so one call site can pass ``device`` and
``timeout_s`` whatever the spec is); unknown ones go to the vLLM engine.
"""

from __future__ import annotations

import logging
import os

from kernelrl.errors import ConfigError
from kernelrl.llm.backends.base import PRICES_PER_MTOK, Backend, Generation, Usage, price_for

log = logging.getLogger(__name__)

_HTTP_KW = {"timeout_s", "max_retries", "concurrency", "backoff_s", "max_backoff_s", "price_per_mtok",
            "extra_body", "connect_timeout_s"}
_HF_KW = {"device", "dtype", "model", "tokenizer", "trust_remote_code", "max_context"}


def resolve_api_key(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit
    env = os.environ.get("KERNELRL_LLM_API_KEY")
    if env:
        return env
    try:
        from kernelrl.config.settings import get_settings

        key = get_settings().llm_api_key
        return key.get_secret_value() if key is not None else None
    except Exception:  # a settings error must not hide behind the LLM call; the caller's settings load reports it
        return None


def make_backend(spec: str, **kw) -> Backend:
    spec = str(spec).strip()
    if spec.startswith(("http://", "https://")):
        from kernelrl.llm.backends.openai_http import OpenAIBackend

        base_url, _, model = spec.partition("#")
        if not model:
            try:
                from kernelrl.config.settings import get_settings

                model = get_settings().llm_model or ""
            except Exception:
                model = ""
        api_key = resolve_api_key(kw.pop("api_key", None))
        return OpenAIBackend(base_url, model, api_key=api_key, **{k: v for k, v in kw.items() if k in _HTTP_KW})
    if spec.startswith("vllm:"):
        from kernelrl.llm.backends.vllm_backend import VLLMBackend
        from kernelrl.llm.tiny import resolve_model_path

        engine = {k: v for k, v in kw.items() if k not in _HTTP_KW | {"api_key", "device", "model", "tokenizer",
                                                                       "max_context"}}
        return VLLMBackend(resolve_model_path(spec[5:]), **engine)
    from kernelrl.llm.backends.hf import HFBackend
    from kernelrl.llm.tiny import resolve_model_path

    if spec.startswith(("/", "./", "../", "~")) and not os.path.isdir(os.path.expanduser(spec)):
        raise ConfigError(f"--llm {spec}: no such model directory")
    try:
        return HFBackend(resolve_model_path(os.path.expanduser(spec)), **{k: v for k, v in kw.items() if k in _HF_KW})
    except (OSError, ValueError) as e:  # not a model dir, unknown id offline, bad config: one line, not a trace
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"--llm {spec}: cannot load the model ({first[:300]})") from None


def __getattr__(name: str):  # lazy: importing the package must not import httpx/transformers/vllm
    if name == "OpenAIBackend":
        from kernelrl.llm.backends.openai_http import OpenAIBackend

        return OpenAIBackend
    if name == "HFBackend":
        from kernelrl.llm.backends.hf import HFBackend

        return HFBackend
    if name == "VLLMBackend":
        from kernelrl.llm.backends.vllm_backend import VLLMBackend

        return VLLMBackend
    raise AttributeError(name)


__all__ = ["Backend", "Generation", "HFBackend", "OpenAIBackend", "PRICES_PER_MTOK", "Usage", "VLLMBackend",
           "make_backend", "price_for", "resolve_api_key"]
