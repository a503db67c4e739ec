"""Switch a detected technique off by a source transform, so its share of a kernel's speedup can be measured.

``TRANSFORMS[name](source) -> Transformed`` rewrites the kernel's Python source (AST in, ``ast.unparse`` out;
comments are lost, behaviour is kept) and counts the edits it made. A technique that is detected but that no
transform could touch is *not switchable* and ``kernelrl ablate`` reports it as such, with the reason from
``kernelrl.reports.techniques.TECHNIQUES``. What each transform does:

- ``tf32``: ``allow_tf32 = True`` (matmul and cuDNN) and the reduced-precision-reduction flags -> False;
  ``set_float32_matmul_precision(...)`` -> ``"highest"``; ``fp32_precision = "tf32"`` -> ``"ieee"``.
- ``half_precision``: ``.half()`` / ``.bfloat16()`` -> ``.float()``; ``torch.float16|half|bfloat16`` ->
  ``torch.float32``; ``autocast(...)`` gets ``enabled=False``. Half types inside CUDA/Triton code stay.
- ``channels_last``: ``torch.channels_last[_3d]`` -> ``torch.contiguous_format``.
- ``cudnn_benchmark``: ``cudnn.benchmark = True`` -> False.
- ``torch_compile``: ``torch.compile(f, ...)`` / ``torch.jit.script|trace(f, ...)`` -> ``f``; the decorators
  ``@torch.compile[(...)]`` / ``@torch.jit.script`` are removed.
- ``cuda_graphs``: ``torch.cuda.make_graphed_callables(m, args)`` -> ``m``; ``torch.compile(..., mode=
  "reduce-overhead"|"max-autotune")`` loses its ``mode``. A hand-written capture (``torch.cuda.graph(g)`` +
  ``g.replay()``) is left alone: turning a replay back into the captured calls needs the program's intent.
- ``streams``: ``torch.cuda.Stream(...)`` -> ``torch.cuda.current_stream()`` and ``with torch.cuda.stream(s)``
  -> ``with contextlib.nullcontext()``: all work runs on the current stream, waits become no-ops.
- ``inplace``: ``inplace=True`` -> False; a statement ``x.relu_(...)`` -> ``x = x.relu(...)``; an in-place
  method called on a temporary (``f(x).relu_()``) -> its out-of-place twin. ``copy_``/``fill_``/``zero_``
  and friends stay (no out-of-place form keeps the code valid).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass

from kernelrl.reports.techniques import TECHNIQUES, detect, dotted, strip_seed_header

# In-place methods with an out-of-place twin of the same signature (name without the trailing underscore).
OUT_OF_PLACE = {
    "abs_", "acos_", "add_", "addcdiv_", "addcmul_", "addmm_", "asin_", "atan_", "baddbmm_", "ceil_", "clamp_",
    "clamp_max_", "clamp_min_", "clip_", "cos_", "cosh_", "div_", "erf_", "exp_", "expm1_", "floor_", "hardtanh_",
    "leaky_relu_", "lerp_", "log_", "log1p_", "log2_", "masked_fill_", "mul_", "neg_", "pow_", "reciprocal_",
    "relu_", "round_", "rsqrt_", "sigmoid_", "sign_", "sin_", "sinh_", "sqrt_", "square_", "sub_", "tan_", "tanh_",
    "trunc_", "where_", "gelu_", "silu_", "elu_", "celu_", "selu_", "mish_", "hardswish_", "hardsigmoid_", "t_",
    "transpose_", "unsqueeze_", "squeeze_", "true_divide_", "fmod_", "remainder_", "nan_to_num_", "logit_",
}
_INPLACE_FUNCS = {"relu_", "sigmoid_", "tanh_", "elu_", "leaky_relu_", "hardtanh_", "selu_", "celu_", "rrelu_",
                  "threshold_"}  # torch.relu_(x) / F.relu_(x) -> torch.relu(x)


@dataclass
class Transformed:
    source: str
    edits: int  # how many places were rewritten; 0 = the transform found nothing it could change
    notes: list[str]


def _const(v) -> ast.Constant:
    return ast.Constant(value=v)


def _torch_attr(*parts: str) -> ast.AST:
    node: ast.AST = ast.Name(id="torch", ctx=ast.Load())
    for p in parts:
        node = ast.Attribute(value=node, attr=p, ctx=ast.Load())
    return node


class _Rewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.edits = 0
        self.notes: list[str] = []

    def run(self, source: str) -> Transformed:
        tree = ast.parse(strip_seed_header(source))
        tree = self.visit(tree)
        ast.fix_missing_locations(tree)
        return Transformed(ast.unparse(tree) + "\n" if self.edits else source, self.edits, self.notes)


class _TF32(_Rewriter):
    FLAGS = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        for t in node.targets:
            if isinstance(t, ast.Attribute) and t.attr in self.FLAGS:
                if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                    node.value = _const(False)
                    self.edits += 1
            if isinstance(t, ast.Attribute) and t.attr == "fp32_precision":
                node.value = _const("ieee")
                self.edits += 1
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if dotted(node.func).endswith("set_float32_matmul_precision"):
            if not (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "highest"):
                node.args = [_const("highest")]
                node.keywords = []
                self.edits += 1
        return self.generic_visit(node)


class _Half(_Rewriter):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("half", "bfloat16") and not node.args \
                and not dotted(node.func).startswith(("torch.", "tl.")):
            node.func.attr = "float"
            self.edits += 1
        elif "autocast" in dotted(node.func):
            kws = [k for k in node.keywords if k.arg != "enabled"]
            node.keywords = [*kws, ast.keyword(arg="enabled", value=_const(False))]
            self.edits += 1
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr in ("float16", "half", "bfloat16") and dotted(node) in (
                "torch.float16", "torch.half", "torch.bfloat16"):
            self.edits += 1
            return _torch_attr("float32")
        return node


class _ChannelsLast(_Rewriter):
    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr in ("channels_last", "channels_last_3d") and dotted(node).startswith("torch."):
            self.edits += 1
            return _torch_attr("contiguous_format")
        return node


class _CudnnBenchmark(_Rewriter):
    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if any(isinstance(t, ast.Attribute) and dotted(t).endswith("cudnn.benchmark") for t in node.targets):
            if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                node.value = _const(False)
                self.edits += 1
        return node


_COMPILERS = ("torch.compile", "torch.jit.script", "torch.jit.trace", "torch.jit.trace_module")


def _strip_decorators(rw: _Rewriter, node):
    keep = []
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if dotted(target) in _COMPILERS:
            rw.edits += 1
        else:
            keep.append(d)
    node.decorator_list = keep
    return rw.generic_visit(node)


class _TorchCompile(_Rewriter):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if dotted(node.func) in _COMPILERS:
            if node.args:
                self.edits += 1
                return node.args[0]
            # torch.compile(mode=...) used as a decorator factory: handled by the decorator rule
        return node

    def visit_FunctionDef(self, node):
        return _strip_decorators(self, node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        return _strip_decorators(self, node)


class _CudaGraphs(_Rewriter):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = dotted(node.func)
        if name.endswith("make_graphed_callables") and node.args:
            self.edits += 1
            return node.args[0]
        if name == "torch.compile":
            kws = [k for k in node.keywords if not (k.arg == "mode" and isinstance(k.value, ast.Constant)
                                                    and k.value.value in ("reduce-overhead", "max-autotune"))]
            if len(kws) != len(node.keywords):
                node.keywords = kws
                self.edits += 1
        return node

    def run(self, source: str) -> Transformed:
        out = super().run(source)
        if "CUDAGraph" in source or "cuda.graph(" in source:
            out.notes.append("a hand-written CUDA graph capture/replay remains (not rewritable automatically)")
        return out


class _Streams(_Rewriter):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = dotted(node.func)
        if name.endswith("cuda.Stream") or name.endswith("cuda.ExternalStream"):
            self.edits += 1
            return ast.Call(func=_torch_attr("cuda", "current_stream"), args=[], keywords=[])
        return node

    def visit_With(self, node: ast.With) -> ast.AST:
        for item in node.items:
            ce = item.context_expr
            if isinstance(ce, ast.Call) and dotted(ce.func).endswith("cuda.stream"):
                item.context_expr = ast.Call(
                    func=ast.Attribute(value=ast.Call(func=ast.Name(id="__import__", ctx=ast.Load()),
                                                      args=[_const("contextlib")], keywords=[]),
                                       attr="nullcontext", ctx=ast.Load()), args=[], keywords=[])
                self.edits += 1
        return self.generic_visit(node)


class _Inplace(_Rewriter):
    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        call = node.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in OUT_OF_PLACE
                and isinstance(call.func.value, (ast.Name, ast.Attribute, ast.Subscript))):
            target = copy.deepcopy(call.func.value)
            target.ctx = ast.Store()
            call.func.attr = call.func.attr[:-1]
            self.edits += 1
            self.generic_visit(call)
            return ast.Assign(targets=[target], value=call)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        for kw in node.keywords:
            if kw.arg == "inplace" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                kw.value = _const(False)
                self.edits += 1
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in OUT_OF_PLACE and isinstance(f.value, ast.Call):
            f.attr = f.attr[:-1]  # in place on a temporary: the out-of-place twin returns the same value
            self.edits += 1
        elif isinstance(f, ast.Attribute) and f.attr in _INPLACE_FUNCS and dotted(f.value) in (
                "torch", "F", "torch.nn.functional", "nn.functional") and node.args and isinstance(node.args[0],
                                                                                                  ast.Call):
            f.attr = f.attr[:-1]
            self.edits += 1
        return node


TRANSFORMS: dict[str, Callable[[str], Transformed]] = {
    "tf32": lambda s: _TF32().run(s),
    "half_precision": lambda s: _Half().run(s),
    "channels_last": lambda s: _ChannelsLast().run(s),
    "cudnn_benchmark": lambda s: _CudnnBenchmark().run(s),
    "torch_compile": lambda s: _TorchCompile().run(s),
    "cuda_graphs": lambda s: _CudaGraphs().run(s),
    "streams": lambda s: _Streams().run(s),
    "inplace": lambda s: _Inplace().run(s),
}


@dataclass
class Variant:
    technique: str
    switchable: bool
    source: str | None  # the kernel with the technique switched off; None when not switchable
    edits: int
    reason: str  # why not switchable, or notes on what stayed


def plan(source: str, techniques: list[str] | None = None) -> list[Variant]:
    """One variant per detected technique: the transformed source, or why it cannot be switched off."""
    out = []
    for tag in techniques if techniques is not None else detect(source):
        tech = TECHNIQUES[tag]
        fn = TRANSFORMS.get(tech.switch_off or "")
        if fn is None:
            out.append(Variant(tag, False, None, 0, tech.why_not or "no transform"))
            continue
        try:
            t = fn(source)
        except SyntaxError as e:
            out.append(Variant(tag, False, None, 0, f"source does not parse ({e.msg})"))
            continue
        if t.edits == 0:
            out.append(Variant(tag, False, None, 0, tech.why_not or "detected, but no rewritable occurrence"))
        else:
            out.append(Variant(tag, True, t.source, t.edits, "; ".join(t.notes)))
    return out


# -- measuring ---------------------------------------------------------------------------------------------------
def run_ablation(task, source: str, scorer, *, only: list[str] | None = None) -> dict:
    """Score the kernel as given and once per switchable technique with that technique switched off.

    ``scorer`` is a ``kernelrl.reports.scoring.Scorer`` (final protocol). Returns a JSON-able dict with the full
    kernel's result and one entry per detected technique: switchable or why not, the speedup with it off, and
    the share of the kernel's log-speedup it accounts for, (ln full - ln off) / ln full (only meaningful when
    the full kernel is faster than the reference and the variant is still correct).
    """
    import math

    from kernelrl.reports.sources import Pick

    tags = detect(source)
    if only:
        unknown = sorted(set(only) - set(TECHNIQUES))
        if unknown:
            from kernelrl.errors import KernelRLError

            raise KernelRLError(f"--only: unknown technique {unknown[0]!r} (known: {', '.join(TECHNIQUES)})")
        tags = [t for t in tags if t in only]
    variants = plan(source, tags)
    picks = [Pick(task, source, variant="full", origin="ablate")]
    picks += [Pick(task, v.source, variant=f"without {v.technique}", origin="ablate") for v in variants if v.switchable]
    results = scorer.score(picks)
    full = results[0] or {}
    full_ok = bool(full.get("executable") and full.get("correct") and (full.get("speedup") or 0) > 0)
    full_s = float(full.get("speedup") or 0) if full_ok else 0.0
    by_variant = {p.variant: r for p, r in zip(picks[1:], results[1:])}
    rows = []
    for v in variants:
        row = {"technique": v.technique, "description": TECHNIQUES[v.technique].description,
               "switchable": v.switchable, "edits": v.edits, "note": v.reason}
        if v.switchable:
            r = by_variant.get(f"without {v.technique}") or {}
            ok = bool(r.get("executable") and r.get("correct") and (r.get("speedup") or 0) > 0)
            off = float(r.get("speedup") or 0) if ok else 0.0
            row.update(success_off=ok, speedup_off=off, error_off=None if ok else (r.get("error") or "unsuccessful"),
                       flags_off=list(r.get("flags") or []))
            if ok and full_ok and full_s > 1.0:
                row["share_of_gain"] = (math.log(full_s) - math.log(off)) / math.log(full_s)
        rows.append(row)
    return {"task": task.key, "techniques": tags, "full": {"success": full_ok, "speedup": full_s,
            "error": full.get("error"), "flags": list(full.get("flags") or []),
            "custom_kernel_built": full.get("custom_kernel_built"), "device_type": full.get("device_type")},
            "variants": rows, "sources": {v.technique: v.source for v in variants if v.switchable}}


def ablation_markdown(result: dict) -> str:
    from kernelrl.reports.render import fmt, table

    full = result["full"]
    lines = [f"# Ablation of a kernel for {result['task']}", "",
             "Full kernel: "
             f"{'speedup ' + fmt(full['speedup']) if full['success'] else 'unsuccessful: ' + str(full.get('error'))}"
             f" on {full.get('device_type') or '-'}; detected: {', '.join(result['techniques']) or 'nothing'}.", ""]
    rows = []
    for v in result["variants"]:
        if not v["switchable"]:
            rows.append([v["technique"], "no", "-", "-", "-", v["note"]])
            continue
        off = fmt(v["speedup_off"]) if v["success_off"] else f"0 ({str(v['error_off']).splitlines()[0][:50]})"
        rows.append([v["technique"], f"yes ({v['edits']} edits)", off,
                     fmt(full["speedup"] - v["speedup_off"]) if v["success_off"] and full["success"] else "-",
                     f"{100 * v['share_of_gain']:.0f}%" if "share_of_gain" in v else "-", v["note"]])
    lines.append(table(["technique", "switchable", "speedup without it", "lost", "share of ln-gain", "note"], rows,
                       ["l", "l", "r", "r", "r", "l"]))
    return "\n".join(lines) + "\n"
