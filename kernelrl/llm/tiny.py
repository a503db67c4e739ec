"""A tiny causal LM built locally (no download): random-weight Llama + byte-level BPE trained on our corpus.

    path = build_tiny_model(".kernelrl/models/tiny")      # ~10 s on a CPU core, a few MB on disk
    path = resolve_model_path(recipe.model, settings)     # 'tiny' -> <KERNELRL_HOME>/models/tiny, built once

Used by tests and by the smoke recipe (``model.name_or_path: tiny``). The tokenizer is trained on the built-in
tasks, the seed corpus and the prompt templates, so code is a few characters per token and a small model can
memorise the seed corpus. Saved with ``save_pretrained``: AutoModelForCausalLM / AutoTokenizer (and vLLM) load
it from the path. A random-weight model never emits EOS: keep generation budgets small until it is trained.

Cached: a marker file records the build arguments and a digest of the corpus; a second call with the same
arguments returns the existing directory. The build writes to a temp dir renamed into place, so a killed build
never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

# A minimal chat template: role markers are special tokens, so a prompt renders to few tokens.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
MARKER = "kernelrl-tiny.json"
BUILD_VERSION = 3  # bump when the build recipe changes what is produced


def default_corpus() -> list[str]:
    """Built-in task sources, every seed, the prompt templates and a rendered augmentation prompt per task."""
    from kernelrl.tasks import load_seeds, load_suite

    texts = []
    tdir = Path(__file__).resolve().parent / "templates"
    templates = [p.read_text() for p in sorted(tdir.glob("*.md"))]
    for t in load_suite("builtin"):
        texts.append(t.source)
        texts.extend(s.source for s in load_seeds(t))
    texts.extend(templates)
    try:  # prompt-like text: the augmentation prompt as the model will see it
        from kernelrl.llm.prompts import build_augment_messages

        for t in load_suite("builtin"):
            texts.extend(m["content"] for m in build_augment_messages(t))
    except Exception:  # pragma: no cover - prompts are optional for the tokenizer
        pass
    return texts


def _digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode()).digest())
    return h.hexdigest()[:16]


def build_tiny_model(out_dir: str | Path, corpus_texts: list[str] | None = None, *, hidden: int = 128,
                     layers: int = 2, heads: int = 4, vocab: int = 4000, seed: int = 0) -> Path:
    """Build (or return the cached) tiny model at ``out_dir``; returns the directory."""
    out = Path(out_dir)
    texts = corpus_texts if corpus_texts is not None else default_corpus()
    spec = {"hidden": hidden, "layers": layers, "heads": heads, "vocab": vocab, "seed": seed,
            "corpus": _digest(texts), "version": BUILD_VERSION}
    marker = out / MARKER
    if marker.exists():
        try:
            if json.loads(marker.read_text()) == spec:
                return out
        except ValueError:
            pass
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", additional_special_tokens=SPECIALS[4:])
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 4096
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 3,
                          num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                          max_position_embeddings=4096, bos_token_id=fast.bos_token_id,
                          eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, tie_word_embeddings=True)
        model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = fast.pad_token_id
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    fast.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(spec))
    if out.exists():  # a stale build (other args): replace it
        shutil.rmtree(out, ignore_errors=True)
    try:
        os.replace(tmp, out)
    except OSError:  # a concurrent builder won the rename: theirs is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_model_path(model: Any, settings: Any = None) -> str:
    """``tiny`` -> the tiny model under ``<KERNELRL_HOME>/models/tiny`` (built on first use); anything else as is.

    ``model``: a ``ModelConfig`` (its ``name_or_path``) or a string. ``settings``: a ``Settings`` (its
    ``home``), a home directory path, or None (the current settings).
    """
    name = getattr(model, "name_or_path", model)
    name = str(name)
    if name != "tiny":
        return name
    home = settings if settings is None or isinstance(settings, (str, os.PathLike)) else settings.home
    if home is None:
        from kernelrl.config.settings import get_settings

        home = get_settings().home
    return str(build_tiny_model(Path(home) / "models" / "tiny"))
