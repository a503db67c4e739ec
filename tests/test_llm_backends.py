"""LLM backends on real parts: transformers with the tiny local model, and the OpenAI-compatible HTTP client
against a real local chat-completions server serving that model (retries, timeouts, failures, accounting)."""

from __future__ import annotations

import logging
import time

import pytest

from kernelrl.llm import build_augment_messages, make_backend, render_chat
from kernelrl.llm.backends.base import price_for
from kernelrl.llm.backends.openai_http import OpenAIBackend
from kernelrl.tasks import get_task
from tests.test_llm_fixtures import chat_server, tiny_backend, tiny_model_path  # noqa: F401

MSGS = [{"role": "system", "content": "You write fast kernels."}, {"role": "user", "content": "Make softmax fast."}]


# -- transformers ---------------------------------------------------------------------------------------------------
def test_hf_backend_n_samples_and_token_counts(tiny_backend):
    b = tiny_backend
    before = b.usage.to_dict()
    task = get_task("09_Swish")
    prompts = [build_augment_messages(task), MSGS]
    out = b.generate(prompts, n=3, max_tokens=12, temperature=1.0, seed=0)
    assert [len(row) for row in out] == [3, 3]
    for msgs, row in zip(prompts, out):
        want = len(b.tokenizer(render_chat(b.tokenizer, msgs), add_special_tokens=False)["input_ids"])
        for g in row:
            assert g.ok and g.prompt_tokens == want
            assert 1 <= g.completion_tokens <= 12
            assert g.finish_reason in ("length", "stop") and g.latency_s > 0
            assert isinstance(g.text, str)
    after = b.usage
    assert after.requests - before["requests"] == 2
    assert after.generations - before["generations"] == 6
    assert after.completion_tokens - before["completion_tokens"] == sum(g.completion_tokens for r in out for g in r)
    assert after.cost_usd == 0.0
    # sampled: different texts; seeded: reproducible
    assert len({g.text for g in out[0]}) > 1
    again = b.generate(prompts[:1], n=3, max_tokens=12, temperature=1.0, seed=0)
    assert [g.text for g in again[0]] == [g.text for g in out[0]]


def test_hf_backend_stop_strings_and_long_prompts(tiny_model_path):
    from kernelrl.llm.backends.hf import HFBackend

    b = HFBackend(str(tiny_model_path), device="cpu", max_context=64)
    long = [{"role": "user", "content": "x = 1\n" * 200}]
    out = b.generate([long, MSGS], n=2, max_tokens=200, temperature=1.0, seed=1)
    assert all(g.error and "prompt too long" in g.error and g.finish_reason == "error" for g in out[0])
    assert all(g.ok and g.prompt_tokens + g.completion_tokens <= 64 for g in out[1])  # shortened to fit
    assert b.usage.failures == 1 and b.usage.failed_generations == 2
    full = b.generate([MSGS], n=1, max_tokens=20, temperature=1.0, seed=3)[0][0].text
    ch = next((c for c in full[3:] if c.strip()), None)
    if ch:
        cut = b.generate([MSGS], n=1, max_tokens=20, temperature=1.0, seed=3, stop=[ch])[0][0]
        assert ch not in cut.text and cut.finish_reason == "stop"


def test_make_backend_local_path_and_tiny(tiny_model_path, isolated_home, monkeypatch):
    from kernelrl.llm.backends.hf import HFBackend

    b = make_backend(str(tiny_model_path), device="cpu", timeout_s=5)  # timeout_s is not HF's: ignored
    assert isinstance(b, HFBackend) and b.count_tokens("import torch") > 0


# -- OpenAI-compatible HTTP -----------------------------------------------------------------------------------------
def _client(srv, **kw) -> OpenAIBackend:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 20)
    kw.setdefault("max_retries", 3)
    return OpenAIBackend(srv.base_url, "tiny", **kw)


def test_http_backend_generates_from_the_served_model(chat_server):
    b = _client(chat_server, api_key="sk-test-secret", price_per_mtok=(1.0, 2.0))
    out = b.generate([MSGS, build_augment_messages(get_task("09_Swish"))], n=2, max_tokens=10, temperature=1.0,
                     seed=5)
    assert [len(r) for r in out] == [2, 2]
    assert all(g.ok and g.finish_reason in ("length", "stop") for r in out for g in r)
    # the server saw what we sent
    assert {r["n"] for r in chat_server.requests} == {2}
    assert all(r["max_tokens"] == 10 and r["model"] == "tiny" for r in chat_server.requests)
    assert sorted(r["seed"] for r in chat_server.requests) == [5, 6]  # prompt k gets seed + k
    assert all(h.get("Authorization") == "Bearer sk-test-secret" for h in chat_server.headers_seen)
    # usage: tokens from the response's usage block, cost from the price override
    u = b.usage
    assert u.requests == 2 and u.failures == 0 and u.generations == 4
    assert u.prompt_tokens == sum(r[0].prompt_tokens for r in out) > 0
    assert u.completion_tokens == sum(g.completion_tokens for r in out for g in r) > 0
    assert u.cost_usd == pytest.approx((u.prompt_tokens * 1.0 + u.completion_tokens * 2.0) / 1e6)
    assert "sk-test-secret" not in repr(b)
    b.close()


@pytest.mark.parametrize("fault", ["429", "500", "garbage", "html", "no_choices"])
def test_http_backend_retries_transient_failures(chat_server, fault):
    chat_server.faults.extend([fault])
    b = _client(chat_server)
    out = b.generate([MSGS], n=2, max_tokens=6, temperature=1.0)
    if fault == "no_choices":  # a well-formed answer without choices is a failure of that request, not retried
        assert all(g.error and "no choices" in g.error for g in out[0])
        return
    assert len(out[0]) == 2 and all(g.ok for g in out[0]), [g.error for g in out[0]]
    assert len(chat_server.requests) == 2
    assert b.usage.retries == 1 and b.usage.failures == 0


def test_http_backend_timeout_then_retry(chat_server):
    chat_server.hang_s = 2.0
    chat_server.faults.append("hang")
    b = _client(chat_server, timeout_s=0.5)
    t0 = time.monotonic()
    out = b.generate([MSGS], n=1, max_tokens=4, temperature=1.0)
    assert out[0][0].ok
    assert time.monotonic() - t0 >= 0.5
    assert b.usage.retries == 1


def test_http_backend_records_failures_without_losing_the_batch(chat_server, caplog):
    # the first prompt's request keeps failing; the second prompt must still be answered
    b = _client(chat_server, max_retries=2, concurrency=1)
    chat_server.faults.extend(["garbage", "garbage", "garbage"])
    with caplog.at_level(logging.WARNING):
        out = b.generate([MSGS, MSGS], n=2, max_tokens=4, temperature=1.0)
    assert all(g.error and "not valid JSON" in g.error and g.finish_reason == "error" for g in out[0])
    assert "failed after 3 attempts" in out[0][0].error
    assert all(g.ok for g in out[1])
    assert b.usage.failures == 1 and b.usage.failed_generations == 2
    # a 4xx other than 429 is not retried
    chat_server.faults.append("400")
    n_before = len(chat_server.requests)
    bad = b.generate([MSGS], n=1, max_tokens=4)[0][0]
    assert bad.error.startswith("HTTP 400") and len(chat_server.requests) == n_before + 1


def test_http_backend_server_ignoring_n(chat_server):
    chat_server.faults.append("ignore_n")
    b = _client(chat_server)
    out = b.generate([MSGS], n=3, max_tokens=4, temperature=1.0, seed=3)
    assert len(out[0]) == 3 and all(g.ok for g in out[0])
    # one request for 3 that returned 1, then one request per missing sample without n, each with its own seed
    assert [r.get("n") for r in chat_server.requests] == [3, None, None]
    assert [r["seed"] for r in chat_server.requests] == [3, 3 + 7919, 3 + 2 * 7919]


def test_http_backend_concurrency_limit(chat_server):
    chat_server.delay_s = 0.3
    b = _client(chat_server, concurrency=2)
    out = b.generate([MSGS] * 5, n=1, max_tokens=2, temperature=1.0)
    assert all(r[0].ok for r in out)
    assert chat_server.max_in_flight == 2 and b.max_in_flight == 2


def test_http_backend_unreachable_server():
    b = OpenAIBackend("http://127.0.0.1:9/v1", "m", max_retries=1, backoff_s=0.01, timeout_s=2)
    g = b.generate([MSGS], n=2, max_tokens=4)[0]
    assert len(g) == 2 and all("connection error" in x.error for x in g)


def test_make_backend_http_spec_and_secret_key(chat_server, monkeypatch, caplog):
    from kernelrl.config.settings import get_settings

    monkeypatch.setenv("KERNELRL_LLM_API_KEY", "sk-from-env-123")
    get_settings.cache_clear()
    try:
        b = make_backend(f"{chat_server.base_url}#tiny", timeout_s=20, device="cuda", max_retries=0)
        assert isinstance(b, OpenAIBackend) and b.model_name == "tiny"
        chat_server.faults.append("500")
        with caplog.at_level(logging.DEBUG):
            out = b.generate([MSGS], n=1, max_tokens=2)
        assert out[0][0].error.startswith("failed after 1 attempts: HTTP 500")
        assert chat_server.headers_seen[-1]["Authorization"] == "Bearer sk-from-env-123"
        assert "sk-from-env-123" not in caplog.text and "sk-from-env-123" not in repr(b)
    finally:
        get_settings.cache_clear()


def test_price_table():
    assert price_for("deepseek-chat") == (0.27, 1.10)
    assert price_for("gpt-4o-mini-2024-07-18") == (0.15, 0.60)  # longest prefix wins over gpt-4o
    assert price_for("my-local-model") is None
    assert price_for("anything", (1, 2)) == (1.0, 2.0)


def test_vllm_backend_without_vllm_is_a_clear_error():
    import importlib.util

    from kernelrl.errors import ConfigError

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here (tests/test_llm_vllm.py covers it)")
    with pytest.raises(ConfigError, match="needs vllm"):
        make_backend("vllm:/nonexistent/model")
