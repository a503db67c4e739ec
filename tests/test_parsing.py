"""Response parsing on recorded malformed responses (tests/data/responses/*.txt, expectations in expected.json).

Each expectation: ``ok`` (code found and parses), ``error`` (substring of the error), ``analysis``/``design``
(substring of the section), ``code_contains``/``code_not_contains``, ``warning`` (substring of a warning).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from kernelrl.llm.parsing import parse_response

DATA = Path(__file__).resolve().parent / "data" / "responses"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def test_every_recorded_response_has_an_expectation():
    files = sorted(p.name for p in DATA.glob("*.txt"))
    assert len(files) >= 20
    assert files == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_response(name):
    exp = EXPECTED[name]
    raw = (DATA / name).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw  # garbage bytes go in as bytes
    p = parse_response(text)
    if exp["ok"]:
        assert p.ok, f"{name}: {p.error} {p.warnings}"
        assert p.error is None
        tree = ast.parse(p.code)
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.walk(tree))
    else:
        assert not p.ok
        assert exp["error"] in (p.error or ""), f"{name}: {p.error!r}"
    for key in ("analysis", "design"):
        if key in exp:
            assert exp[key] in (getattr(p, key) or ""), f"{name}: {key}={getattr(p, key)!r}"
    if "code_contains" in exp:
        assert exp["code_contains"] in p.code, p.code
    if "code_not_contains" in exp:
        assert exp["code_not_contains"] not in (p.code or "")
    if "warning" in exp:
        assert any(exp["warning"] in w for w in p.warnings), p.warnings


def test_sections_do_not_swallow_the_code_block():
    text = (DATA / "21_bold_headings_no_code_heading.txt").read_text()
    p = parse_response(text)
    assert "class ModelNew" not in p.design


def test_headings_inside_code_are_not_sections():
    text = "## Code Implementation\n```python\n# Performance analysis: none\nclass ModelNew:\n    pass\n```\n"
    p = parse_response(text)
    assert p.ok and p.analysis is None


def test_never_raises_on_odd_inputs():
    for x in (None, b"", b"\x00\x01", "```", "~~~~\n", "<think>", "</think>", "{", "[1, 2]", '"x"',
              "## Code\n```python\n" + "(" * 5000 + "\n```", "class ModelNew" * 1000):
        p = parse_response(x)
        assert p.error is not None or p.code is not None


def test_syntax_error_keeps_code_for_the_record():
    p = parse_response((DATA / "17_syntax_error.txt").read_text())
    assert p.code is not None and "def forward(self, x)" in p.code
    assert "line 8" in p.error
