"""Prompts: one-shot augmentation and contrastive RL, from the templates in ``templates/`` (our own words).

    msgs = build_augment_messages(task)                       # [{"role": "system", ...}, {"role": "user", ...}]
    msgs = build_contrastive_messages(task, exemplars, backend.count_tokens, budget_tokens=6000)
    p = contrastive_prompt(task, exemplars, count, 6000)      # same, plus which exemplars survived, cut lines
    text = render_chat(tokenizer, msgs)                       # the model's chat template, or a plain fallback

Templates: ``templates/<name>.md`` with ``=== system ===`` / ``=== user ===`` parts and ``{{placeholder}}``
fields (a tiny renderer: code with braces needs no escaping; an unknown or unfilled placeholder is an error).

Budget: the whole prompt (all messages, plus a few tokens per message for the chat format) must fit
``budget_tokens`` as measured by ``token_counter``. Over budget, the longest exemplar is cut in its middle
(head and tail kept, a marker line says how many lines were left out) until it fits or every exemplar is at
its floor; then the lowest-scoring exemplar is dropped and the cutting starts over. The task and the
instructions are never cut: when they alone exceed the budget the prompt is returned over budget
(``ContrastivePrompt.over_budget``) and the backend reports it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kernelrl.tasks.loader import Task

TEMPLATES = Path(__file__).resolve().parent / "templates"
PER_MESSAGE_TOKENS = 4  # role markers and separators a chat template adds around each message
MIN_KEEP_LINES = 12  # an exemplar is never cut below this many lines (head + tail); it is dropped instead
NO_EXEMPLARS = ("None has been verified yet: the reference above is the only implementation so far (speedup "
                "1.00x by definition).")
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate (code averages ~3.5 characters per token on common BPE vocabularies)."""
    return math.ceil(len(text) / 3.5)


@lru_cache(maxsize=16)
def _template(name: str) -> str:
    return (TEMPLATES / f"{name}.md").read_text()


def render(template: str, **values: Any) -> str:
    """Fill ``{{name}}`` fields; every field must be given (KeyError names the missing one)."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - set(values))
    if missing:
        raise KeyError(f"template fields not filled: {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


def template_messages(name: str, **values: Any) -> list[dict]:
    """A template's ``=== role ===`` parts as chat messages, fields filled."""
    template = _template(name)
    render(template, **values)  # every field given (the parts are filled one by one below)
    # split before filling, so filled-in code that happens to contain a role marker line cannot split a message
    parts = re.split(r"^=== (system|user|assistant) ===[ \t]*\n", template, flags=re.MULTILINE)
    if len(parts) == 1:
        return [{"role": "user", "content": render(template, **values).strip()}]
    msgs = []
    for role, part in zip(parts[1::2], parts[2::2]):
        used = {k: v for k, v in values.items() if re.search(r"\{\{\s*" + k + r"\s*\}\}", part)}
        content = render(part, **used).strip()
        if content:
            msgs.append({"role": role, "content": content})
    return msgs


def _source(task: Task | str) -> str:
    return (task.source if isinstance(task, Task) else str(task)).strip("\n")


def build_augment_messages(task: Task | str) -> list[dict]:
    """The one-shot prompt (role; produce identical results, be faster, stay stable; reference verbatim)."""
    return template_messages("augment", reference=_source(task))


def augmentation_prompt(task: Task | str) -> list[dict]:
    """Alias of :func:`build_augment_messages` (the name the baselines use)."""
    return build_augment_messages(task)


# -- contrastive --------------------------------------------------------------------------------------------------
@dataclass
class ContrastivePrompt:
    messages: list[dict]
    shown: list[Any]  # the exemplars in the prompt, in prompt order (best first)
    dropped: list[Any] = field(default_factory=list)  # exemplars left out to fit the budget
    cut_lines: dict[int, int] = field(default_factory=dict)  # index in ``shown`` -> lines left out
    tokens: int = 0
    over_budget: bool = False


def _ex_fields(e: Any) -> tuple[str, float]:
    if isinstance(e, (tuple, list)):
        return str(e[0]), float(e[1])
    return str(e.source), float(e.speedup)


def _cut(lines: list[str], keep: int) -> str:
    """Keep ``keep`` lines: about two thirds from the head, the rest from the tail, a marker in between."""
    if keep >= len(lines):
        return "\n".join(lines)
    head = max(1, (keep * 2) // 3)
    tail = max(1, keep - head)
    omitted = len(lines) - head - tail
    marker = f"# ... [{omitted} lines of this implementation omitted to fit the prompt] ..."
    return "\n".join(lines[:head] + [marker] + lines[-tail:])


def _messages(reference: str, parts: list[str]) -> list[dict]:
    previous = "\n".join(parts) if parts else NO_EXEMPLARS
    return template_messages("contrastive", reference=reference, previous=previous)


def _count(messages: list[dict], counter: TokenCounter) -> int:
    return sum(counter(m["content"]) + PER_MESSAGE_TOKENS for m in messages)


def contrastive_prompt(task: Task | str, exemplars: Sequence[Any], token_counter: TokenCounter | None = None,
                       budget_tokens: int | None = None, *, sort: bool = True) -> ContrastivePrompt:
    """Task + previous implementations with their speedups + protocol + restrictions, within the budget.

    ``exemplars``: objects with ``.source``/``.speedup`` (``kernelrl.store.sampling.Exemplar``) or
    ``(source, speedup)`` pairs. ``sort``: best first (the order shown to the model); False keeps the order given.
    """
    counter = token_counter or approx_tokens
    reference = _source(task)
    items = list(exemplars)
    if sort:
        items.sort(key=lambda e: -_ex_fields(e)[1])
    full = [(_ex_fields(e)[0].strip("\n").split("\n"), _ex_fields(e)[1]) for e in items]

    def build(k: int, keeps: list[int]) -> list[dict]:
        parts = [render(_template("exemplar"), index=i + 1, speedup=f"{sp:.2f}x", code=_cut(lines, keeps[i]))
                 for i, (lines, sp) in enumerate(full[:k])]
        return _messages(reference, parts)

    for k in range(len(full), -1, -1):
        keeps = [len(lines) for lines, _ in full[:k]]
        msgs = build(k, keeps)
        total = _count(msgs, counter)
        while budget_tokens is not None and total > budget_tokens:
            # the longest exemplar (in tokens) that can still be cut
            sizes = [(counter(_cut(full[i][0], keeps[i])), i) for i in range(k) if keeps[i] > MIN_KEEP_LINES]
            if not sizes:
                break
            size, i = max(sizes)
            need = total - budget_tokens
            per_line = max(size / max(keeps[i], 1), 1e-9)
            drop = max(1, math.ceil(need / per_line) + 1)
            keeps[i] = max(MIN_KEEP_LINES, keeps[i] - drop)
            msgs = build(k, keeps)
            total = _count(msgs, counter)
        if budget_tokens is None or total <= budget_tokens or k == 0:
            cut = {i: len(full[i][0]) - keeps[i] for i in range(k) if keeps[i] < len(full[i][0])}
            return ContrastivePrompt(messages=msgs, shown=items[:k], dropped=items[k:], cut_lines=cut,
                                     tokens=total, over_budget=budget_tokens is not None and total > budget_tokens)
    raise AssertionError("unreachable")  # pragma: no cover


def build_contrastive_messages(task: Task | str, exemplars: Sequence[Any], token_counter: TokenCounter | None = None,
                               budget_tokens: int | None = None, *, budget_chars: int | None = None) -> list[dict]:
    """The contrastive prompt's messages (see :func:`contrastive_prompt`). ``budget_chars`` counts characters
    instead of tokens (kept for callers without a tokenizer)."""
    if budget_chars is not None and budget_tokens is None:
        token_counter, budget_tokens = len, budget_chars
    return contrastive_prompt(task, exemplars, token_counter, budget_tokens).messages


# -- chat rendering -----------------------------------------------------------------------------------------------
def plain_chat(messages: list[dict]) -> str:
    """The fallback format for tokenizers without a chat template."""
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_chat(tokenizer, messages: list[dict]) -> str:
    """The model's own chat template with the generation prompt; templates that refuse a system role get it
    folded into the first user message; a plain format when the tokenizer has no template."""
    if not has_chat_template(tokenizer):
        return plain_chat(messages)
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception:
        if messages and messages[0]["role"] == "system" and len(messages) > 1:
            merged = [{"role": messages[1]["role"],
                       "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}]
            try:
                return tokenizer.apply_chat_template(merged + list(messages[2:]), tokenize=False,
                                                     add_generation_prompt=True)
            except Exception:
                pass
        return plain_chat(messages)


def messages_text(messages: list[dict]) -> str:
    """A readable, lossless record of a prompt (stored with each attempt)."""
    return plain_chat(messages)
