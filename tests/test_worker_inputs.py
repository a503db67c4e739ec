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


def _template(dtype: str, kind: str = "float", **extra) -> list[dict]:
    t = {"kind": kind, "shape": [64, 33] if not extra.get("sym") else [33, 33], "dtype": dtype}
    if kind == "float":
        t.update(nonneg=False, lo=-3.0, hi=3.0, std=1.0, mean=0.25)
    elif kind == "int":
        t.update(lo=0, hi=7)
    t.update(extra)
    return [t, {"kind": "const", "value": 5}]


def _drawn_into_matches(dev: torch.device, dtype: str, kind: str, **extra) -> None:
    from kernelrl.evaluation.worker_inputs import generate_columns

    tpl = _template(dtype, kind, **extra)
    plain = generate_columns(tpl, 1234, dev, 3)
    bufs = [torch.full_like(plain[0], 9), [None] * 3]  # 9: out of every drawn range (True for a bool)
    into = generate_columns(tpl, 1234, dev, 3, into=bufs)
    assert torch.equal(into[0], plain[0]) and into[1] == plain[1] == [5, 5, 5]
    if extra.get("sym"):
        assert torch.equal(into[0], into[0].transpose(-1, -2))
    in_place = into[0] is bufs[0]
    assert in_place == (kind in ("int", "bool") or dev.type == "cuda"), (dev, dtype, kind, extra)


def _staging_ops(dev: torch.device, tpl: list[dict], into: list | None) -> list[str]:
    """The work one staging of ``tpl`` runs: kernel names on a GPU, compute operators on the CPU (allocation,
    views and dispatch wrappers left out), in order."""
    from torch.profiler import ProfilerActivity, profile

    from kernelrl.evaluation.worker_inputs import generate_columns, refill_columns

    acts = [ProfilerActivity.CUDA] if dev.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        if into is None:
            generate_columns(tpl, 77, dev, 3)
        else:
            refill_columns(into, tpl, 77, dev, 3)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    skip = ("empty", "as_strided", "view", "unbind", "select", "alias", "transpose", "detach", "lift", "resize_",
            "aten::to", "aten::_to_copy", "result_type", "expand", "permute", "contiguous", "item")
    names = []
    for e in prof.events():
        if dev.type == "cuda" and e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if dev.type == "cpu" and (not e.name.startswith("aten::") or any(k in e.name for k in skip)):
            continue
        names.append(e.name)
    return names


def _same_staging_work(dev: torch.device, tpl: list[dict]) -> None:
    """A replayed block's staging (refill_columns into its graph buffers) runs the work an eager block's staging
    (fresh columns) runs, no copy more: the staging is harness time, charged to the candidate beyond the
    reference's, and only one side may replay."""
    from kernelrl.evaluation.worker_inputs import generate_columns

    bufs = generate_columns(tpl, 5, dev, 3)
    eager, replay = _staging_ops(dev, tpl, None), _staging_ops(dev, tpl, bufs)
    assert eager and sorted(replay) == sorted(eager), (tpl[0], eager, replay)


def test_integers_and_booleans_are_drawn_into_the_buffers_they_refill():
    _drawn_into_matches(torch.device("cpu"), "int64", "int")
    _drawn_into_matches(torch.device("cpu"), "bool", "bool")
    _drawn_into_matches(torch.device("cpu"), "float32", "float")  # CPU floats: drawn apart, the caller copies


def test_a_refilled_boolean_or_integer_column_costs_no_more_than_a_fresh_one():
    # at 24 the boolean mask was drawn apart and copied into its buffer: one copy more than the eager side's
    for tpl in (_template("bool", "bool"), _template("int64", "int")):
        _same_staging_work(torch.device("cpu"), tpl)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_replayed_blocks_draw_into_their_graph_buffers_with_the_same_values():
    for dtype, kind, extra in (("float32", "float", {}), ("float16", "float", {}), ("int32", "int", {}),
                               ("bool", "bool", {}), ("float32", "float", {"sym": True}),
                               ("float16", "float", {"sym": True, "nonneg": True}),
                               ("float32", "float", {"triu": 0})):
        _drawn_into_matches(torch.device("cuda"), dtype, kind, **extra)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_replayed_blocks_staging_runs_the_kernels_an_eager_blocks_does():
    for dtype, kind, extra in (("float32", "float", {}), ("float16", "float", {}), ("bfloat16", "float", {}),
                               ("int32", "int", {}), ("bool", "bool", {}), ("float32", "float", {"sym": True}),
                               ("float16", "float", {"sym": True}), ("float32", "float", {"tril": -1})):
        _same_staging_work(torch.device("cuda"), _template(dtype, kind, **extra))
