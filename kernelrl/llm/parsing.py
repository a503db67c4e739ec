"""Parse an LLM response into its three sections and the ``ModelNew`` code. Never raises.

    p = parse_response(text)
    p.analysis, p.design   # "## Performance Analysis" / "## Algorithm Design" sections (None if absent)
    p.code                 # the candidate file (None when no ModelNew code was found)
    p.error                # why the response cannot be evaluated (None when p.code parses as Python)
    p.warnings             # what was repaired or guessed (unterminated fence, tabs, joined blocks, ...)

What it tolerates, because real models do all of it: ``<think>...</think>`` reasoning before the answer (and a
bare ``</think>`` when the chat template opened the tag), CRLF/CR line ends, NUL and other control bytes,
heading variants (any level ``#``..``######``, bold ``**...**``, numbering ``1.``/``Step 1:``, case, trailing
colons, Chinese titles), missing sections, prose around the code, several code blocks (the last one that
defines ``class ModelNew`` wins; earlier Python blocks it depends on are joined in front), ``~~~`` fences, an
unterminated fence (truncated output), no fences at all (code taken from the first ``import``/``class ModelNew``
line, trailing prose cut off), tab indentation mixed with spaces, and code wrapped in a JSON object or string.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from dataclasses import dataclass, field

SECTION_TITLES: dict[str, tuple[str, ...]] = {
    # canonical name -> accepted titles (lower case, compared after stripping numbering and punctuation)
    "analysis": ("performance analysis", "analysis", "performance", "性能分析", "分析"),
    "design": ("algorithm design", "design", "algorithm", "optimization design", "optimisation design",
               "algorithm design steps", "design steps", "算法设计", "设计"),
    "code": ("code implementation", "implementation", "code", "final code", "optimized code",
             "optimised code", "final implementation", "代码实现", "代码", "实现"),
}
_TITLE_TO_SECTION = {t: name for name, titles in SECTION_TITLES.items() for t in titles}

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)[^`]*$")
_HEADING = re.compile(
    r"^[ \t]{0,3}(?:(?P<hashes>#{1,6})[ \t]*)?(?P<body>.+?)[ \t]*#*[ \t]*$"
)
_NUMBERING = re.compile(r"^(?:(?:step|part|section)\s*)?(?:\d+|[ivx]+|[a-c])[.):：]?\s+", re.IGNORECASE)
_MODELNEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)
_CODE_START = re.compile(r"^(?:import[ \t]+\w|from[ \t]+[\w.]+[ \t]+import[ \t]|class[ \t]+ModelNew\b)")
_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_PY_INFO = {"", "python", "py", "python3", "py3", "python3.10", "python3.11", "python3.12", "pytorch", "torch"}


@dataclass
class Parsed:
    analysis: str | None = None
    design: str | None = None
    code: str | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code is not None and self.error is None


@dataclass
class _Block:
    start: int  # line index of the opening fence (or of the first code line when unfenced)
    end: int  # line index after the block
    info: str
    text: str
    terminated: bool = True


# -- normalisation ------------------------------------------------------------------------------------------------
def _normalise(text: str | bytes | None, warnings: list[str]) -> str:
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    cleaned = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", "", text)
    if cleaned != text:
        warnings.append("control characters removed")
    if cleaned.startswith("\ufeff"):
        cleaned = cleaned[1:]
    return cleaned


def _strip_thinking(text: str, warnings: list[str]) -> tuple[str, str | None]:
    """(answer, error). Reasoning blocks are removed; a response that ends inside one has no answer."""
    # A chat template that opens <think> itself leaves only the closing tag in the completion.
    m_open = _THINK_OPEN.search(text)
    close = re.search(r"</(think|thinking|reasoning)>", text, re.IGNORECASE)
    if close and (m_open is None or close.start() < m_open.start()):
        warnings.append("reasoning before a bare closing tag removed")
        text = text[close.end():]
    out, removed = [], False
    pos = 0
    while True:
        m = _THINK_OPEN.search(text, pos)
        if m is None:
            out.append(text[pos:])
            break
        out.append(text[pos:m.start()])
        end = re.compile(rf"</{m.group(1)}>", re.IGNORECASE).search(text, m.end())
        removed = True
        if end is None:
            rest = "".join(out).strip()
            if not rest:
                return "", "the response ended inside a <think> block (no answer after the reasoning)"
            warnings.append("unterminated <think> block dropped")
            break
        pos = end.end()
    if removed:
        warnings.append("<think> reasoning removed")
    return "".join(out), None


def _unwrap_json(text: str, warnings: list[str]) -> str:
    """If the whole response is JSON (optionally fenced as ```json), return the string inside that holds code."""
    s = text.strip()
    m = re.match(r"^(?:`{3,}|~{3,})\s*json\s*\n(.*?)\n?(?:`{3,}|~{3,})\s*$", s, re.DOTALL | re.IGNORECASE)
    if m:
        s = m.group(1).strip()
    if not s or s[0] not in "{[\"":
        return text
    try:
        obj = json.loads(s)
    except ValueError:
        return text
    strings: list[str] = []

    def walk(o):
        if isinstance(o, str):
            strings.append(o)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(obj)
    if not strings:
        return text
    with_model = [x for x in strings if _MODELNEW.search(x)]
    if with_model:
        warnings.append("response was JSON: code taken from its string field")
        # keep the sections too when the object has them as separate fields
        others = [x for x in strings if x not in with_model and re.search(r"^\s*#{1,6}\s", x, re.MULTILINE)]
        return "\n\n".join(others + [with_model[-1] if "```" in with_model[-1]
                                     else "## Code Implementation\n```python\n" + with_model[-1] + "\n```"])
    return max(strings, key=len)


# -- blocks and sections ------------------------------------------------------------------------------------------
def _fenced_blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group("fence")
        indent = len(m.group("indent").expandtabs(4))
        info = m.group("info").lower().strip("{}.")
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        body = lines[i + 1:j]
        if indent:  # a fence indented inside a list item: dedent the body by the same amount
            body = [ln[indent:] if ln[:indent].strip() == "" else ln.lstrip() for ln in body]
        terminated = j < len(lines)
        blocks.append(_Block(i, j + 1 if terminated else j, info, "\n".join(body), terminated))
        i = j + 1
    return blocks


def _heading_section(line: str) -> str | None:
    m = _HEADING.match(line)
    if not m:
        return None
    body = m.group("body").strip()
    hashed = bool(m.group("hashes"))
    bold = re.fullmatch(r"(\*\*|__)(.+?)(\*\*|__)\s*[:：]?", body)
    if bold:
        body = bold.group(2)
    elif not hashed:
        # a plain line counts as a heading only when it is a bare title ending in a colon ("Algorithm Design:")
        if not re.search(r"[:：]\s*$", body) or len(body) > 40:
            return None
    body = body.strip().strip("*_").strip()
    body = re.sub(r"[:：.]\s*$", "", body).strip()
    body = _NUMBERING.sub("", body).strip().strip("*_").strip()
    key = re.sub(r"\s+", " ", body.lower())
    key = re.sub(r"\s*\(.*\)$", "", key)  # "Algorithm Design (numbered steps)"
    if key in _TITLE_TO_SECTION:
        return _TITLE_TO_SECTION[key]
    return None


def _sections(lines: list[str], blocks: list[_Block]) -> dict[str, tuple[int, int]]:
    """Section name -> (first content line, end line), headings inside code fences ignored. First wins."""
    in_block = set()
    for b in blocks:
        in_block.update(range(b.start, b.end))
    heads: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if i in in_block:
            continue
        name = _heading_section(line)
        if name:
            heads.append((i, name))
    out: dict[str, tuple[int, int]] = {}
    for k, (i, name) in enumerate(heads):
        end = heads[k + 1][0] if k + 1 < len(heads) else len(lines)
        if name not in out:
            out[name] = (i + 1, end)
    return out


def _section_text(lines: list[str], span: tuple[int, int] | None) -> str | None:
    if span is None:
        return None
    text = "\n".join(lines[span[0]:span[1]]).strip()
    return text or None


# -- code checks --------------------------------------------------------------------------------------------------
def _syntax(code: str) -> SyntaxError | None:
    try:
        ast.parse(code)
    except SyntaxError as e:
        return e
    except (ValueError, RecursionError, MemoryError) as e:  # NUL bytes, absurd nesting
        err = SyntaxError(str(e))
        err.lineno = 1
        return err
    return None


def _fix_tabs(code: str, warnings: list[str]) -> str:
    """Mixed tab/space indentation (TabError): retry with tabs as 4 spaces, then 8."""
    if "\t" not in code:
        return code
    err = _syntax(code)
    if err is None or not isinstance(err, (TabError, IndentationError)):
        return code
    for width in (4, 8):
        fixed = "\n".join(_expand_indent(line, width) for line in code.split("\n"))
        if _syntax(fixed) is None:
            warnings.append(f"tab indentation expanded to {width} spaces")
            return fixed
    return code


def _expand_indent(line: str, width: int) -> str:
    stripped = line.lstrip(" \t")
    return line[:len(line) - len(stripped)].expandtabs(width) + stripped


def _trim_trailing_prose(code: str, warnings: list[str]) -> str:
    """Unfenced code followed by prose: cut at the first line that breaks parsing, if ModelNew survives."""
    for _ in range(8):
        err = _syntax(code)
        if err is None or not err.lineno:
            return code
        lines = code.split("\n")
        cut = err.lineno - 1
        # walk back over blank lines and a dangling decorator/def header that the prose interrupted
        head = "\n".join(lines[:cut]).rstrip()
        if not head or not _MODELNEW.search(head) or head == code.rstrip():
            return code
        warnings.append(f"text after line {cut} is not code and was cut off")
        code = head
    return code


def _module_defs(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs if hasattr(node, "args") else []:
                names.add(a.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


def _missing_names(code: str) -> set[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - _module_defs(tree) - set(dir(builtins)) - {"__file__", "__name__"}


def _join_dependencies(chosen: _Block, blocks: list[_Block], warnings: list[str]) -> str:
    """Prepend earlier Python blocks that define names the chosen block uses but does not define."""
    code = chosen.text
    missing = _missing_names(code)
    if not missing:
        return code
    earlier = [b for b in blocks if b.start < chosen.start and b.info in _PY_INFO and _syntax(b.text) is None]
    needed: list[_Block] = []
    for b in reversed(earlier):
        defs = _module_defs(ast.parse(b.text))
        if defs & missing:
            needed.insert(0, b)
            missing -= defs
        if not missing:
            break
    if not needed:
        return code
    warnings.append(f"joined {len(needed)} earlier code block(s) that define names ModelNew's block uses")
    return "\n\n".join([b.text for b in needed] + [code])


# -- entry point --------------------------------------------------------------------------------------------------
def parse_response(text: str | bytes | None) -> Parsed:
    """Sections and code of one response; ``error`` says why it cannot be evaluated. Never raises."""
    try:
        return _parse(text)
    except Exception as e:  # pragma: no cover - a parser bug must not lose the attempt
        return Parsed(error=f"parser failure: {type(e).__name__}: {e}")


def _parse(text: str | bytes | None) -> Parsed:
    warnings: list[str] = []
    text = _normalise(text, warnings)
    if not text.strip():
        return Parsed(error="empty response", warnings=warnings)
    answer, err = _strip_thinking(text, warnings)
    if err:
        return Parsed(error=err, warnings=warnings)
    answer = _unwrap_json(answer, warnings)
    lines = answer.split("\n")
    blocks = _fenced_blocks(lines)
    spans = _sections(lines, blocks)
    with_model = [b for b in blocks if _MODELNEW.search(b.text)]
    chosen = with_model[-1] if with_model else None
    if chosen is not None:  # prose sections end where the code block starts (no "## Code" heading case)
        spans = {k: (a, min(b, chosen.start) if a <= chosen.start else b) for k, (a, b) in spans.items()}
    res = Parsed(analysis=_section_text(lines, spans.get("analysis")),
                 design=_section_text(lines, spans.get("design")), warnings=warnings)

    code: str | None = None
    if chosen is not None:
        if len(with_model) > 1:
            warnings.append(f"{len(with_model)} code blocks define ModelNew: the last one was taken")
        if not chosen.terminated:
            warnings.append("unterminated code fence (output truncated?)")
        code = _join_dependencies(chosen, blocks, warnings)
    else:
        code = _unfenced_code(lines, blocks, warnings)
        if code is not None:
            code = _trim_trailing_prose(code, warnings)

    if code is None:
        found = [n for n in ("analysis", "design", "code") if n in spans]
        what = f"sections found: {', '.join(found)}" if found else "no sections found"
        if blocks:
            what += f"; {len(blocks)} code block(s), none defines class ModelNew"
        elif re.search(r"\bclass\s+Model\b", answer):
            what += "; it defines class Model, not ModelNew"
        res.error = f"no ModelNew code found ({what})"
        return res

    code = code.strip("\n")
    code = _fix_tabs(code, warnings)
    res.code = code + "\n"
    e = _syntax(code)
    if e is not None:
        line = (code.split("\n")[e.lineno - 1].strip() if e.lineno and 0 < e.lineno <= code.count("\n") + 1 else "")
        res.error = f"code does not parse as Python (line {e.lineno}: {e.msg})" + (f": {line[:80]}" if line else "")
    elif not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.walk(ast.parse(code))):
        res.error = "no class ModelNew defined in the code"
    return res


def _unfenced_code(lines: list[str], blocks: list[_Block], warnings: list[str]) -> str | None:
    """Code without usable fences: from the first import / class ModelNew line to the end."""
    in_block = set()
    for b in blocks:
        in_block.update(range(b.start, b.end))
    text_lines = [(i, ln) for i, ln in enumerate(lines) if i not in in_block]
    if not any(_MODELNEW.match(ln) for _, ln in text_lines):
        return None
    first_model = next(i for i, ln in text_lines if _MODELNEW.match(ln))
    start = first_model
    for i, ln in text_lines:
        if i > first_model:
            break
        if _CODE_START.match(ln):
            start = i
            break
    # imports further up belong too only if contiguous code leads to ModelNew; prose between is dropped later
    body = [ln for i, ln in text_lines if i >= start]
    # stop at the next section heading (prose after the code)
    for k, ln in enumerate(body):
        if k and _heading_section(ln) is not None and not ln.lstrip().startswith("#!"):
            if _HEADING.match(ln) and ln.lstrip().startswith("## "):
                body = body[:k]
                break
    warnings.append("no code fence around ModelNew: code taken from the first import/class line")
    # prose lines between the imports and the class (e.g. "Here is the class:") break parsing: drop them
    code = "\n".join(body)
    if _syntax(code) is not None:
        kept = [ln for ln in body if not _looks_like_prose(ln)]
        alt = "\n".join(kept)
        if _syntax(alt) is None and _MODELNEW.search(alt):
            warnings.append("prose lines inside unfenced code were dropped")
            return alt
    return code


def _looks_like_prose(line: str) -> bool:
    s = line.strip()
    if not s or line[:1] in " \t" or s.startswith("#"):
        return False
    if _CODE_START.match(s) or re.match(
            r"^(@|(def|class|if|elif|else|for|while|with|try|except|finally|async|await|return|raise|assert|del|"
            r"global|print|match|case|lambda|pass)\b|[A-Za-z_][\w.\[\]]*\s*([-+*/|&]?=|\(|,|:))", s):
        return False
    words = re.findall(r"[A-Za-z]+", s)
    return len(words) >= 3 or bool(re.search(r"[\u4e00-\u9fff]", s))


def extract_code(text: str) -> tuple[str | None, list[str]]:
    """The ModelNew code of a response and the parser's warnings (None when there is no usable code)."""
    p = parse_response(text)
    return (p.code if p.code is not None else None), p.warnings
