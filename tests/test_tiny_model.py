"""The tiny local model: builds offline, loads with the Auto classes, generates, applies its chat template,
is cached, and ``model.name_or_path: tiny`` resolves to it under KERNELRL_HOME."""

from __future__ import annotations

import json
import time

import pytest

from kernelrl.llm.tiny import MARKER, build_tiny_model, resolve_model_path

CORPUS = ["def forward(self, x):\n    return torch.relu(x)\n"] * 50 + [
    "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"] * 50


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", CORPUS, hidden=32, layers=1, heads=2, vocab=400)


def test_builds_loads_and_generates(small_model):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (small_model / "config.json").exists() and (small_model / "tokenizer.json").exists()
    tok = AutoTokenizer.from_pretrained(small_model)
    model = AutoModelForCausalLM.from_pretrained(small_model)
    assert model.config.model_type == "llama" and model.config.hidden_size == 32
    assert tok.bos_token == "<s>" and tok.eos_token == "</s>" and tok.pad_token == "<pad>"
    assert len(tok) <= 400 + 8
    ids = tok("def forward(self, x):", return_tensors="pt")
    # the corpus-trained BPE merges code into few tokens
    assert ids["input_ids"].shape[1] < len("def forward(self, x):") / 2
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] == ids["input_ids"].shape[1] + 5
    assert isinstance(tok.decode(out[0]), str)


def test_chat_template(small_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(small_model)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "<|system|>\nS\n<|user|>\nU\n<|assistant|>\n"
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "A"}], tokenize=False)
    assert full.startswith(text[: -len("<|assistant|>\n")]) and full.endswith("<|assistant|>\nA\n</s>")
    # role markers are single special tokens
    assert len(tok("<|assistant|>", add_special_tokens=False)["input_ids"]) == 1


def test_cached_and_rebuilt_on_other_args(small_model):
    spec = json.loads((small_model / MARKER).read_text())
    t0 = time.monotonic()
    assert build_tiny_model(small_model, CORPUS, hidden=32, layers=1, heads=2, vocab=400) == small_model
    assert time.monotonic() - t0 < 1.0
    build_tiny_model(small_model, CORPUS, hidden=32, layers=1, heads=2, vocab=400, seed=1)
    assert json.loads((small_model / MARKER).read_text())["seed"] == 1 != spec["seed"]
    assert not list(small_model.parent.glob(".m.tmp-*"))


def test_resolve_tiny_under_home(isolated_home, monkeypatch):
    from kernelrl.config.settings import load_settings
    from kernelrl.config.stages import ModelConfig

    assert resolve_model_path("org/some-model") == "org/some-model"
    assert resolve_model_path(ModelConfig(name_or_path="/a/path"), load_settings()) == "/a/path"
    p = resolve_model_path(ModelConfig(name_or_path="tiny"), load_settings())
    assert p == str(isolated_home / "models" / "tiny")
    assert (isolated_home / "models" / "tiny" / "config.json").exists()
    assert resolve_model_path("tiny", isolated_home) == p  # cached: same directory
