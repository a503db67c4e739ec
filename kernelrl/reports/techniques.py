"""Static technique analysis: which optimisation techniques a kernel's source uses (AST + regex, no execution).

``detect(source)`` returns tags from ``TECHNIQUES``. Detection is static and heuristic by nature: it says what
the code *contains* (a CUDA graph capture, a side stream, a ``load_inline`` extension, ``.half()`` casts ...),
not whether that part mattered for the speed. ``kernelrl ablate`` measures that, by switching a technique off
where a source transform can (see ``kernelrl.reports.ablation``).

The seed-corpus header (``# kernelrl-seed`` ... ``# why:``) is stripped before detection so a seed's declared
tags never leak into what is detected.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

SEED_HEADER_LINES = 5  # "# kernelrl-seed" + expect/device/technique/why


@dataclass(frozen=True)
class Technique:
    name: str
    description: str
    switch_off: str | None  # the ablation transform that removes it (kernelrl.reports.ablation), or None
    why_not: str = ""  # when switch_off is None: why it cannot be switched off by a source transform


TECHNIQUES: dict[str, Technique] = {t.name: t for t in [
    Technique("cuda_graphs", "CUDA graph capture/replay (torch.cuda.graph, CUDAGraph, make_graphed_callables, "
              "torch.compile mode='reduce-overhead')", "cuda_graphs",
              "manual capture + replay cannot be rewritten into direct calls in general"),
    Technique("streams", "side CUDA streams (torch.cuda.Stream / torch.cuda.stream, cudaStreamCreate)", "streams",
              "streams created inside CUDA C++ code are not rewritten"),
    Technique("custom_cuda", "its own CUDA C++ kernels (load_inline / cpp_extension.load / __global__)", None,
              "the custom kernel is the whole implementation; 'off' is the reference itself"),
    Technique("triton", "Triton kernels (@triton.jit)", None,
              "the Triton kernel is the whole implementation; 'off' is the reference itself"),
    Technique("torch_compile", "torch.compile / TorchScript (torch.jit.script/trace)", "torch_compile"),
    Technique("fused_ops", "fused library primitives (addmm, baddbmm, scaled_dot_product_attention, softmax, "
              "layer_norm, logsumexp, silu/gelu, fused LSTM/GRU ...)", None,
              "replacing a fused primitive by its unfused parts is a different program, not a switch"),
    Technique("tf32", "TF32 / reduced-precision matmul flags (allow_tf32, set_float32_matmul_precision)", "tf32"),
    Technique("half_precision", "fp16/bf16 compute (.half(), torch.float16/bfloat16, autocast, __half)",
              "half_precision", "half types inside CUDA C++ or Triton code are not rewritten"),
    Technique("double_precision", "float64 compute (.double(), torch.float64)", None,
              "a precision choice that changes results; reported, not ablated"),
    Technique("channels_last", "channels_last memory format", "channels_last"),
    Technique("cudnn_benchmark", "torch.backends.cudnn.benchmark autotuning", "cudnn_benchmark"),
    Technique("inplace", "in-place tensor ops (x.relu_(), inplace=True, out=)", "inplace",
              "some in-place calls (copy_, fill_, index_*_) have no out-of-place form that keeps the code valid"),
    Technique("weight_folding", "arithmetic on parameters (folding scales/biases/products into weights)", None,
              "folding is an algebraic rewrite of the computation, not a switch"),
    Technique("algebraic_claim", "comments/docstrings that claim an algebraic simplification or identity", None,
              "a claim in prose; the code it describes is the implementation"),
    Technique("shared_memory", "CUDA __shared__ memory tiling", None, "part of the custom kernel"),
    Technique("warp_primitives", "warp shuffles / cooperative groups (__shfl_*, cg::)", None,
              "part of the custom kernel"),
    Technique("vectorized_memory", "vectorised or read-only loads (float4, __ldg)", None, "part of the custom kernel"),
    Technique("tensor_cores", "tensor-core instructions (wmma, mma.sync, tl.dot)", None, "part of the custom kernel"),
    Technique("cublas", "direct cuBLAS/cuBLASLt calls from C++", None, "part of the custom kernel"),
    Technique("result_caching", "SUSPECT: results cached across calls (keyed on data_ptr, memo dicts, lru_cache)",
              None, "caching is a reward hack the evaluator must defeat, not an optimisation to ablate"),
]}

# Library calls that do in one kernel what a reference often spells out as a chain of operators.
_FUSED_CALLS = {"addmm", "addmv", "addbmm", "baddbmm", "addcmul", "addcdiv", "addr", "scaled_dot_product_attention",
                "lerp", "fused_layer_norm", "linear_relu", "softmax", "log_softmax", "layer_norm", "rms_norm",
                "group_norm", "logsumexp", "silu", "gelu", "mish", "hardswish", "hardsigmoid", "elu", "selu",
                "smooth_l1_loss", "huber_loss", "cdist", "lstm", "gru", "multi_head_attention_forward"}
_INPLACE_EXCLUDE = {"requires_grad_", "zero_grad", "register_buffer", "normal_", "uniform_", "kaiming_uniform_",
                    "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "trunc_normal_", "orthogonal_",
                    "constant_", "ones_", "zeros_", "eye_", "dirac_", "sparse_", "manual_seed_", "share_memory_",
                    "retain_grad_", "set_", "record_stream_"}
_INPLACE_METHOD = re.compile(r"^[a-z][a-z0-9_]*[a-z0-9]_$")
_HALF_ATTRS = {"float16", "half", "bfloat16"}
_COMPILE_NAMES = {"torch.compile", "torch.jit.script", "torch.jit.trace"}
_TF32_FLAGS = {"allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
               "fp32_precision"}

_REGEX = {
    "cuda_graphs": re.compile(r"cudaGraph(Launch|Instantiate|Create)|cudaStreamBeginCapture"),
    "streams": re.compile(r"cudaStreamCreate"),
    "custom_cuda": re.compile(r"__global__\s+void|\bload_inline\b|cpp_extension\.load\b|RawKernel|jiterator"),
    "triton": re.compile(r"@triton\.(jit|autotune)|^\s*import triton|^\s*from triton", re.M),
    "half_precision": re.compile(r"\b__half2?\b|\b__nv_bfloat16\b|\bhalf2\b|\btl\.(float16|bfloat16)\b"),
    "shared_memory": re.compile(r"__shared__"),
    "warp_primitives": re.compile(r"__shfl(_xor|_down|_up)?(_sync)?\b|cooperative_groups|\bcg::|__reduce_\w+_sync"),
    "vectorized_memory": re.compile(r"\bfloat4\b|\bfloat2\b|\bint4\b|__ldg\s*\(|\bhalf2\b"),
    "tensor_cores": re.compile(r"\bwmma::|mma\.sync|\btl\.dot\s*\(|\bnvcuda::wmma"),
    "cublas": re.compile(r"\bcublas\w*\s*\(|cublasLt"),
    "algebraic_claim": re.compile(
        r"(#|\"\"\"|''').{0,200}?\b(algebra\w*|simplif\w*|closed[- ]form|identity|equivalen\w*|fold\w*|"
        r"distribut\w*|commut\w*|associativ\w*|telescop\w*)\b", re.I),
}


def strip_seed_header(source: str) -> str:
    lines = source.splitlines()
    if lines and lines[0].strip() == "# kernelrl-seed":
        return "\n".join(lines[SEED_HEADER_LINES:])
    return source


def dotted(node: ast.AST) -> str:
    """``torch.cuda.graph`` for an Attribute/Name chain; '' for anything else (calls in the chain keep '()')."""
    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            break
        elif isinstance(node, ast.Call):
            parts.append("()")
            node = node.func
        else:
            parts.append("?")
            break
    return ".".join(reversed(parts)).replace(".()", "()")


def _is_param_ref(node: ast.AST) -> bool:
    """``self.linear.weight`` / ``self.conv.bias`` / ``self.weight``: a parameter reference."""
    return isinstance(node, ast.Attribute) and node.attr in ("weight", "bias") and dotted(node).startswith("self.")


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.tags: set[str] = set()

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = dotted(node)
        if node.attr in ("CUDAGraph", "make_graphed_callables", "graph_pool_handle") or name.endswith("cuda.graph"):
            self.tags.add("cuda_graphs")
        if name.endswith("cuda.Stream") or name.endswith("cuda.stream") or name.endswith("cuda.ExternalStream"):
            self.tags.add("streams")
        if name.startswith(("torch.", "tl.")) and node.attr in _HALF_ATTRS:
            self.tags.add("half_precision")
        if name.startswith("torch.") and node.attr in ("float64", "double"):
            self.tags.add("double_precision")
        if node.attr in ("channels_last", "channels_last_3d"):
            self.tags.add("channels_last")
        if name in _COMPILE_NAMES or name.startswith("torch._dynamo"):
            self.tags.add("torch_compile")
        if node.attr == "data_ptr":
            self.tags.add("_data_ptr")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        if last == "set_float32_matmul_precision" and not (
                node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "highest"):
            self.tags.add("tf32")
        if name in _COMPILE_NAMES:
            for kw in node.keywords:
                if kw.arg == "mode" and isinstance(kw.value, ast.Constant) and kw.value.value in (
                        "reduce-overhead", "max-autotune"):
                    self.tags.add("cuda_graphs")
        if last in ("load_inline",) or name.endswith("cpp_extension.load"):
            self.tags.add("custom_cuda")
        if last in _FUSED_CALLS:
            self.tags.add("fused_ops")
        if last in ("half", "bfloat16") and isinstance(node.func, ast.Attribute) and not node.args:
            self.tags.add("half_precision")
        if last == "double" and isinstance(node.func, ast.Attribute) and not node.args:
            self.tags.add("double_precision")
        if "autocast" in name:
            self.tags.add("half_precision")
        if (isinstance(node.func, ast.Attribute) and _INPLACE_METHOD.match(last) and last not in _INPLACE_EXCLUDE
                and not name.startswith(("nn.init", "torch.nn.init", "init."))):
            self.tags.add("inplace")
        for kw in node.keywords:
            if kw.arg == "inplace" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                self.tags.add("inplace")
            if kw.arg == "out" and name.startswith("torch."):
                self.tags.add("inplace")
            if kw.arg == "memory_format" and "channels_last" in dotted(kw.value):
                self.tags.add("channels_last")
        if last in ("lru_cache", "cache") and name.startswith(("functools", "lru_cache", "cache")):
            self.tags.add("result_caching")
        if last in ("matmul", "mm", "outer", "einsum") and any(_is_param_ref(a) for a in node.args):
            self.tags.add("weight_folding")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # a flag counts when it is switched on (anything but a literal False / "ieee")
        off = isinstance(node.value, ast.Constant) and node.value.value in (False, "ieee")
        for t in node.targets:
            if isinstance(t, ast.Attribute) and not off:
                if t.attr in _TF32_FLAGS:
                    self.tags.add("tf32")
                if dotted(t).endswith("cudnn.benchmark"):
                    self.tags.add("cudnn_benchmark")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.Div, ast.MatMult)) and (
                _is_param_ref(node.left) or _is_param_ref(node.right)):
            self.tags.add("weight_folding")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        # self._cache[x.data_ptr()] / cache[key] where the key involves data_ptr: results keyed on input addresses
        if "cache" in dotted(node.value).lower():
            self.tags.add("_cache_subscript")
        self.generic_visit(node)


def detect(source: str) -> list[str]:
    """Technique tags found in a kernel's source, sorted (names from ``TECHNIQUES``)."""
    text = strip_seed_header(source)
    tags: set[str] = set()
    for tag, rx in _REGEX.items():
        if rx.search(text):
            tags.add(tag)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    if tree is not None:
        v = _Visitor()
        v.visit(tree)
        tags |= v.tags
        if "_cache_subscript" in tags and "_data_ptr" in tags:
            tags.add("result_caching")
    else:  # unparsable: fall back to a few regexes over the text
        for tag, rx in {"cuda_graphs": r"CUDAGraph|cuda\.graph\(", "streams": r"cuda\.[Ss]tream\(",
                        "tf32": r"allow_tf32|set_float32_matmul_precision", "channels_last": r"channels_last",
                        "half_precision": r"\.half\(\)|float16|bfloat16", "torch_compile": r"torch\.compile"}.items():
            if re.search(rx, text):
                tags.add(tag)
    return sorted(t for t in tags if t in TECHNIQUES)


def describe(tag: str) -> str:
    t = TECHNIQUES.get(tag)
    return t.description if t else tag
