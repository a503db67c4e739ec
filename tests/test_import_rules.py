"""The layers' import rules (read from the source's AST, so a violation anywhere fails without running it):

- ``kernelrl/`` (the library) never imports ``steps/`` or ``flows/``; what they share lives in the library
  (``kernelrl.step``: stage registry, step contract, the one ``--set`` parser). The CLI reaches the
  orchestration layer's commands through its plugin registry (``kernelrl.cli.PLUGIN_GROUP``).
- ``steps/`` never import ``flows/`` (a step runs alone, in a container, without Prefect).
- No module imports another package's private names (``from kernelrl.config.recipes import _validate``):
  what is shared gets a public name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path):
    """(line, imported module, names) for every import in ``path``, lazy ones inside functions included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [a.name for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            yield node.lineno, node.args[0].value, []


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, mod, _ in _imports(path):
            if mod.split(".")[0] in forbidden:
                out.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    return out


@pytest.mark.parametrize("package, forbidden", [("kernelrl", ("steps", "flows")), ("steps", ("flows",))])
def test_layers_import_downwards_only(package, forbidden):
    assert _violations(package, forbidden) == []


def test_the_rule_sees_lazy_imports(tmp_path, monkeypatch):
    """The checker itself: a lazy import inside a function and an import_module string count."""
    bad = tmp_path / "kernelrl" / "x.py"
    bad.parent.mkdir()
    bad.write_text("def f():\n    from flows.runner import X\n    import importlib\n"
                   "    importlib.import_module('steps.sft')\n")
    import sys

    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert len(_violations("kernelrl", ("steps", "flows"))) == 2


def test_no_private_names_across_modules():
    out = []
    for package in ("kernelrl", "steps", "flows"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, mod, names in _imports(path):
                if mod.split(".")[0] not in ("kernelrl", "steps", "flows"):
                    continue
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                if private:
                    out.append(f"{path.relative_to(ROOT)}:{line} imports {', '.join(private)} from {mod}")
    assert out == []


def test_long_functions_say_why():
    """No function in the library is over 80 lines unless its docstring says why ("Long because: ...")."""
    out = []
    for path in sorted((ROOT / "kernelrl").rglob("*.py")):
        if {"builtin", "migrations"} & set(path.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80 and "Long because" not in (ast.get_docstring(node) or ""):
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} is {n} lines")
    assert out == []


def test_no_module_over_600_lines():
    """DEVELOPERS.md and issue 34: no module of the library, the steps or the flows over 600 lines (the evaluator's
    worker crept to 604 with one more reply path before a helper moved into ipc)."""
    out = [f"{p.relative_to(ROOT)}: {n} lines" for package in ("kernelrl", "steps", "flows")
           for p in sorted((ROOT / package).rglob("*.py"))
           if {"builtin", "migrations"}.isdisjoint(p.parts) and (n := len(p.read_text().splitlines())) > 600]
    assert out == []
