"""The reference worker's input template (worker_inputs.input_template): shapes, dtypes, value ranges and matrix
structure of get_inputs(), reduced one sample at a time (KernelBench's largest inputs are gigabytes a sample); on a
GPU drawn there."""

import types

import pytest
import torch

from kernelrl.evaluation.worker_inputs import input_template


def _module():
    def get_inputs():
        a = torch.randn(6, 6)
        return [torch.triu(a), a + a.T, torch.randint(3, 9, (4,)), torch.rand(5) < 0.5, 3.0,
                torch.rand(2, 7) * 4 + 1, torch.tril(torch.randn(3, 5, 5), -1), torch.empty(0)]
    return types.SimpleNamespace(get_inputs=get_inputs)


def _check(t):
    kinds = [x["kind"] for x in t]
    assert kinds == ["float", "float", "int", "bool", "const", "float", "float", "float"]
    assert t[0]["triu"] == 0 and "tril" not in t[0] and "sym" not in t[0]
    assert t[1].get("sym") is True and "triu" not in t[1]
    assert (t[2]["lo"], t[2]["hi"]) == (3, 9) or (3 <= t[2]["lo"] and t[2]["hi"] <= 9)
    assert t[2]["dtype"] == "int64" and t[3]["dtype"] == "bool" and t[4]["value"] == 3.0
    assert t[5]["nonneg"] and 1.0 <= t[5]["lo"] < t[5]["hi"] <= 5.0 and t[5]["shape"] == [2, 7]
    assert t[6]["tril"] == -1 and t[6]["shape"] == [3, 5, 5]
    assert t[7]["shape"] == [0] and (t[7]["lo"], t[7]["hi"]) == (0.0, 1.0)


def test_template_kinds_ranges_and_structure_on_cpu():
    t = input_template(_module())
    _check(t)
    # the same seeds every time: the template (and so every timing input) is reproducible
    assert input_template(_module()) == t
    # every sample must share a structure: one triangular sample out of three is not triangular
    calls = iter(range(100))
    mod = types.SimpleNamespace(get_inputs=lambda: [torch.triu(torch.randn(4, 4)) if next(calls) else
                                                    torch.randn(4, 4)])
    assert "triu" not in input_template(mod)[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_template_drawn_on_the_gpu():
    seen = []
    mod = _module()
    inner = mod.get_inputs
    mod.get_inputs = lambda: seen.append(torch.empty(0).device.type) or inner()
    t = input_template(mod, torch.device("cuda"))
    assert seen == ["cuda"] * 3  # drawn under the GPU as torch's default device
    _check(t)


def _template(dtype: str, kind: str = "float") -> list[dict]:
    t = {"kind": kind, "shape": [64, 33], "dtype": dtype}
    if kind == "float":
        t.update(nonneg=False, lo=-3.0, hi=3.0, std=1.0, mean=0.25)
    else:
        t.update(lo=0, hi=7)
    return [t, {"kind": "const", "value": 5}]


def _drawn_into_matches(dev: torch.device, dtype: str, kind: str) -> None:
    from kernelrl.evaluation.worker_inputs import generate_columns

    tpl = _template(dtype, kind)
    plain = generate_columns(tpl, 1234, dev, 3)
    bufs = [torch.full_like(plain[0], 9), [None] * 3]
    into = generate_columns(tpl, 1234, dev, 3, into=bufs)
    assert torch.equal(into[0], plain[0]) and into[1] == plain[1] == [5, 5, 5]
    in_place = into[0] is bufs[0]
    assert in_place == (kind == "int" or (dev.type == "cuda" and dtype == "float32")), (dev, dtype, kind)


def test_integers_are_drawn_into_the_buffers_they_refill():
    _drawn_into_matches(torch.device("cpu"), "int64", "int")
    _drawn_into_matches(torch.device("cpu"), "float32", "float")  # CPU floats: drawn apart, the caller copies


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_replayed_blocks_draw_into_their_graph_buffers_with_the_same_values():
    for dtype, kind in (("float32", "float"), ("float16", "float"), ("int32", "int")):
        _drawn_into_matches(torch.device("cuda"), dtype, kind)
