"""Local transformers backend (CPU or GPU): what tests and the smoke recipe use.

    b = HFBackend("path/or/hf-id", device="cpu", dtype="float32")
    b = HFBackend(None, model=policy_model, tokenizer=tok)    # generate from a model already in memory

Per prompt: the model's chat template (plain fallback), ``generate`` with ``num_return_sequences=n`` and
sampling when temperature > 0 (greedy otherwise; then the n samples are identical). A prompt longer than the
model's context gives failed Generations with the reason; a completion that would overflow the context is
shortened to fit (finish_reason ``length``).
"""

from __future__ import annotations

import time

from kernelrl.llm.backends.base import Backend, Generation, apply_stop


def resolve_device(device: str) -> str:
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class HFBackend(Backend):
    def __init__(self, model_path: str | None, device: str = "cpu", dtype: str = "float32", model=None,
                 tokenizer=None, trust_remote_code: bool = False, max_context: int | None = None):
        super().__init__()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = self.model_name = str(model_path
                                          or getattr(getattr(model, "config", None), "_name_or_path", "model"))
        self.device = resolve_device(device)
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if model is None:
            torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
            model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype,
                                                         trust_remote_code=trust_remote_code)
            model.to(self.device)
        self.model = self.lm = model  # the torch module (``model`` kept for callers that reach into it)
        self.lm.eval()
        cfg = getattr(self.lm, "config", None)
        self.context_window = max_context or getattr(cfg, "max_position_embeddings", None)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode(self, messages: list[dict]):
        from kernelrl.llm.prompts import has_chat_template, render_chat

        text = render_chat(self.tokenizer, messages)
        # a chat template already carries its special tokens; the plain fallback gets the tokenizer's BOS
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=not has_chat_template(self.tokenizer))

    def generate(self, prompts, n=1, *, max_tokens=1024, temperature=1.0, top_p=1.0, seed=None, stop=None):
        import torch

        out: list[list[Generation]] = []
        eos_ids = self._eos_ids()
        for k, messages in enumerate(prompts):
            t0 = time.monotonic()
            enc = self._encode(messages)
            plen = int(enc["input_ids"].shape[1])
            budget = max_tokens
            if self.context_window:
                if plen >= self.context_window:
                    out.append(self.failed(n, f"prompt too long: {plen} tokens >= "
                                              f"context window {self.context_window}"))
                    self._account(failures=1, generations=n, failed_generations=n)
                    continue
                budget = min(max_tokens, self.context_window - plen)
            kw = dict(max_new_tokens=budget, num_return_sequences=n, pad_token_id=self.tokenizer.pad_token_id,
                      eos_token_id=sorted(eos_ids) or None)
            if temperature and temperature > 0:
                kw.update(do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=0)
            else:
                kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            if stop:
                kw.update(stop_strings=list(stop), tokenizer=self.tokenizer)
            enc = {key: v.to(self.device) for key, v in enc.items()}
            try:
                with torch.random.fork_rng(devices=[] if self.device == "cpu" else None):
                    if seed is not None:
                        torch.manual_seed(int(seed) + k)
                    with torch.no_grad():
                        seqs = self.lm.generate(**enc, **kw)
            except Exception as e:  # OOM, bad settings: this prompt fails, the batch goes on
                out.append(self.failed(n, f"generate failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                                       time.monotonic() - t0))
                self._account(failures=1, generations=n, failed_generations=n)
                continue
            dt = time.monotonic() - t0
            row = []
            for seq in seqs:
                comp = seq[plen:].tolist()
                ntok, reason = len(comp), "length"
                for j, tok in enumerate(comp):
                    if tok in eos_ids:
                        ntok, reason = j + 1, "stop"
                        break
                else:  # padding after a stop string / another sequence's end
                    while (ntok and comp[ntok - 1] == self.tokenizer.pad_token_id
                           and self.tokenizer.pad_token_id not in eos_ids):
                        ntok -= 1
                text = self.tokenizer.decode(comp[:ntok], skip_special_tokens=True)
                text, stopped = apply_stop(text, stop)
                if stopped:
                    reason = "stop"
                elif reason == "length" and ntok < budget:
                    reason = "stop"
                row.append(Generation(text=text, prompt_tokens=plen, completion_tokens=ntok, finish_reason=reason,
                                      latency_s=dt))
            self._account(requests=1, prompt_tokens=plen, completion_tokens=sum(g.completion_tokens for g in row),
                          generations=len(row))
            out.append(row)
        return out

    def _eos_ids(self) -> set[int]:
        ids = set()
        eos = getattr(getattr(self.lm, "generation_config", None), "eos_token_id", None)
        for v in (eos if isinstance(eos, list) else [eos]) + [self.tokenizer.eos_token_id]:
            if v is not None:
                ids.add(int(v))
        return ids
