"""Prompt templates: augmentation and contrastive content, token-budgeted exemplar truncation (with the tiny
model's real tokenizer), chat template rendering and its fallback."""

from __future__ import annotations

import pytest

from kernelrl.llm.prompts import (
    MIN_KEEP_LINES,
    NO_EXEMPLARS,
    approx_tokens,
    augmentation_prompt,
    build_augment_messages,
    build_contrastive_messages,
    contrastive_prompt,
    render,
    render_chat,
)
from kernelrl.store.sampling import Exemplar
from kernelrl.tasks import get_task
from tests.test_llm_fixtures import tiny_backend, tiny_model_path  # noqa: F401

TASK = get_task("02_Softmax")


def _long_code(tag: str, n: int) -> str:
    body = "\n".join(f"    y{i} = x * {i}  # {tag} step {i}" for i in range(n))
    return (f"import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
            f"{body}\n        return x  # {tag} end\n")


def test_augment_prompt_has_role_task_and_reference_verbatim():
    msgs = build_augment_messages(TASK)
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert TASK.source.strip() in user
    for must in ("identical results", "faster", "numerically stable", "class ModelNew", "```python"):
        assert must in user
    assert augmentation_prompt(TASK) == msgs
    assert "{{" not in user and "}}" not in user


def test_contrastive_prompt_sections_order_and_scores():
    ex = [Exemplar(1, "class ModelNew: slow = 1\n", 0.8), Exemplar(2, "class ModelNew: fast = 1\n", 2.5)]
    p = contrastive_prompt(TASK, ex)
    user = p.messages[-1]["content"]
    assert TASK.source.strip() in user
    assert [e.candidate_id for e in p.shown] == [2, 1]  # best first
    assert user.index("speedup 2.50x") < user.index("speedup 0.80x")
    assert user.index("fast = 1") < user.index("slow = 1")
    order = ["## Reference implementation", "## Previous implementations", "## Generation protocol",
             "## Performance Analysis", "## Algorithm Design", "## Code Implementation", "## Requirements"]
    assert [user.index(h) for h in order] == sorted(user.index(h) for h in order)
    for rule in ("scored 0", "No caching or reuse", "batch size", "No side streams", "constructor signature"):
        assert rule in user
    # tuples work too (the training stage's form), and no exemplars renders the "none yet" text
    assert build_contrastive_messages(TASK, [("class ModelNew: fast = 1\n", 2.5)])[-1]["content"].count("### Impl") == 1
    none = contrastive_prompt(TASK, []).messages[-1]["content"]
    assert NO_EXEMPLARS in none and "### Implementation" not in none


def test_truncation_cuts_the_longest_exemplar_in_the_middle(tiny_backend):
    count = tiny_backend.count_tokens
    long, short = _long_code("LONG", 300), _long_code("SHORT", 10)
    ex = [Exemplar(1, long, 1.2), Exemplar(2, short, 1.5)]
    full = contrastive_prompt(TASK, ex, count, None)
    budget = full.tokens - 1500
    p = contrastive_prompt(TASK, ex, count, budget)
    user = p.messages[-1]["content"]
    assert p.tokens <= budget and not p.over_budget
    assert len(p.shown) == 2 and not p.dropped
    assert set(p.cut_lines) == {1}  # only the long one (second in prompt order) was cut
    assert "lines of this implementation omitted to fit the prompt" in user
    assert "LONG step 0" in user and "LONG end" in user  # head and tail kept
    assert "LONG step 150" not in user  # the middle went
    assert short.strip() in user  # the short exemplar is intact
    assert TASK.source.strip() in user  # the task is never cut


def test_truncation_drops_the_worst_exemplar_when_cutting_is_not_enough(tiny_backend):
    count = tiny_backend.count_tokens
    # one-line-wide exemplars with few lines cannot be cut below MIN_KEEP_LINES: they must be dropped
    wide = lambda tag: ("\n".join(f"x_{tag}_{i} = '" + "abc " * 60 + "'" for i in range(MIN_KEEP_LINES))  # noqa: E731
                        + "\nclass ModelNew: pass\n")
    ex = [Exemplar(1, wide("a"), 3.0), Exemplar(2, wide("b"), 1.1)]
    base = contrastive_prompt(TASK, [], count, None).tokens
    one = contrastive_prompt(TASK, ex[:1], count, None).tokens
    p = contrastive_prompt(TASK, ex, count, one + 5)
    assert [e.candidate_id for e in p.shown] == [1] and [e.candidate_id for e in p.dropped] == [2]
    q = contrastive_prompt(TASK, ex, count, base + 10)
    assert q.shown == [] and len(q.dropped) == 2 and not q.over_budget
    r = contrastive_prompt(TASK, ex, count, 50)  # even the bare task does not fit: returned whole, flagged
    assert r.over_budget and TASK.source.strip() in r.messages[-1]["content"]


def test_budget_chars_form():
    long = _long_code("L", 400)
    msgs = build_contrastive_messages(TASK, [(long, 1.3)], budget_chars=8000)
    assert sum(len(m["content"]) for m in msgs) <= 8000 + 16
    assert "omitted to fit the prompt" in msgs[-1]["content"]


def test_render_chat_with_template_and_fallback(tiny_backend):
    msgs = build_augment_messages(TASK)
    text = render_chat(tiny_backend.tokenizer, msgs)
    assert text.startswith("<|system|>") and text.rstrip().endswith("<|assistant|>")
    assert TASK.source.strip() in text

    class NoTemplate:
        chat_template = None

    plain = render_chat(NoTemplate(), msgs)
    assert plain.startswith("<|system|>\n") and plain.endswith("<|assistant|>\n")

    class RefusesSystem:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            if messages[0]["role"] == "system":
                raise ValueError("System role not supported")
            return "|".join(m["role"] + ":" + m["content"][:5] for m in messages)

    folded = render_chat(RefusesSystem(), msgs)
    assert folded.startswith("user:You a")  # system text folded into the first user message


def test_render_requires_every_field():
    with pytest.raises(KeyError, match="code"):
        render("{{index}} {{code}}", index=1)
    assert render("a {{ x }} {b}", x="{c}") == "a {c} {b}"
    assert approx_tokens("a" * 35) == 10


def test_role_markers_inside_code_do_not_split_messages():
    code = "=== system ===\nclass ModelNew: pass\n=== user ===\n"
    msgs = contrastive_prompt(TASK, [(code, 1.5)]).messages
    assert [m["role"] for m in msgs] == ["system", "user"] and code.strip() in msgs[1]["content"]
