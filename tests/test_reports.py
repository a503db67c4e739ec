"""Reports: statistics against hand-computed values, a full report built from stored evaluations (SQLite and
Postgres), plots with the expected panels, technique tags and ablation transforms on sample kernels, sources."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrl.reports import stats
from kernelrl.reports.ablation import TRANSFORMS, plan
from kernelrl.reports.report import Report, make_row
from kernelrl.reports.techniques import detect

BUILTIN = Path(__file__).resolve().parents[1] / "kernelrl" / "tasks" / "builtin"
SEEDS = BUILTIN / "seeds"


# -- statistics ----------------------------------------------------------------------------------------------
def test_summary_hand_computed():
    # task 0 failed (its raw speedup 3.0 must not count), the others succeeded
    s = stats.summarize([3.0, 0.5, 1.0, 2.0, 4.0], [False, True, True, True, True], [True, False, True, None, True])
    assert s.n == 5
    assert s.mean == pytest.approx(7.5 / 5)  # (0 + .5 + 1 + 2 + 4) / 5
    assert s.max == 4.0
    assert (s.p75, s.p50, s.p25) == (2.0, 1.0, 0.5)  # sorted [0, .5, 1, 2, 4]: ranks 3, 2, 1
    assert s.success == 4
    assert s.faster == 2  # 2.0 and 4.0; 1.0 is not faster
    assert s.geomean == pytest.approx(math.sqrt(2))  # (.5 * 1 * 2 * 4) ** (1/4) = 4 ** .25
    assert s.geomean_n == 4
    assert s.custom_kernels == 2 and s.custom_share == pytest.approx(0.5)  # the failed custom one is not counted


def test_percentiles_interpolate_and_edge_cases():
    assert stats.percentile([4, 1, 3, 2], 0.25) == pytest.approx(1.75)  # pos 0.75 between 1 and 2
    assert stats.percentile([4, 1, 3, 2], 0.75) == pytest.approx(3.25)
    assert stats.percentile([7], 0.5) == 7 and stats.percentile([], 0.5) == 0.0
    with pytest.raises(ValueError):
        stats.percentile([1], 1.5)
    empty = stats.summarize([])
    assert (empty.n, empty.mean, empty.geomean, empty.custom_share) == (0, 0.0, None, None)
    none_ok = stats.summarize([0.0, float("nan"), -1.0])
    assert none_ok.success == 0 and none_ok.mean == 0.0 and none_ok.geomean is None


def test_summarize_rows_per_level_and_histogram():
    rows = [{"level": 1, "success": True, "speedup": 2.0, "custom_kernel_built": True},
            {"level": 1, "success": False, "speedup": 0.0},
            {"level": 2, "success": True, "speedup": 0.5, "custom_kernel_built": False}]
    out = stats.summarize_rows(rows)
    assert list(out) == ["all", "L1", "L2"]
    assert out["all"].mean == pytest.approx(2.5 / 3) and out["L1"].mean == 1.0 and out["L2"].faster == 0
    assert stats.histogram([-0.3, 0.0, 0.1, 0.5, 0.7], [-0.5, 0.0, 0.5]) == [1, 3]  # 0.5 on the closed last edge
    assert stats.log_bins([-0.3, 0.6], 0.25) == [-0.5, -0.25, 0.0, 0.25, 0.5, 0.75]
    assert stats.log_speedups([math.e, 0.0, 1.0]) == pytest.approx([1.0, 0.0])


def test_technique_table():
    rows = [{"success": True, "speedup": 4.0, "techniques": ["triton"]},
            {"success": True, "speedup": 1.0, "techniques": ["triton", "inplace"]},
            {"success": True, "speedup": 2.0, "techniques": []},
            {"success": False, "speedup": 0.0, "techniques": ["inplace"]}]
    t = {d["technique"]: d for d in stats.technique_table(rows)}
    assert t["triton"]["count"] == 2 and t["triton"]["share"] == pytest.approx(2 / 3)
    assert t["triton"]["mean_speedup"] == 2.5 and t["triton"]["mean_speedup_without"] == 2.0
    assert t["inplace"]["count"] == 1 and t["inplace"]["mean_speedup"] == 1.0  # the failed one is not counted


# -- techniques and ablation transforms ----------------------------------------------------------------------
def _seed(level, task, name):
    return (SEEDS / f"level{level}" / task / f"{name}.py").read_text()


def test_technique_tags_on_seeds():
    assert "custom_cuda" in detect(_seed(1, "01_DiagMatmul", "cuda_row_scale"))
    assert "triton" in detect(_seed(1, "02_Softmax", "triton_online"))
    assert "weight_folding" in detect(_seed(2, "01_Gemm_Scale_ResidualAdd", "folded_weights"))
    assert "double_precision" in detect(_seed(1, "01_DiagMatmul", "float64_matmul"))
    assert "fused_ops" in detect(_seed(1, "02_Softmax", "torch_softmax"))
    # the seed header's declared tags never leak into detection
    assert detect("# kernelrl-seed\n# expect: faster\n# device: any\n# technique: triton, algebraic\n# why: x\n"
                   "class ModelNew:\n    pass\n") == []


SAMPLE = '''
import functools
import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.benchmark = True


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3).half().to(memory_format=torch.channels_last)
        self.side = torch.cuda.Stream()
        self.graph = torch.cuda.CUDAGraph()
        self._cache = {}

    @torch.compile
    def forward(self, x):
        key = x.data_ptr()
        if key in self._cache:
            return self._cache[key]
        with torch.cuda.stream(self.side):
            y = self.conv(x.to(torch.float16))
        y.relu_()
        return y
'''


def test_technique_tags_on_a_synthetic_kernel():
    tags = detect(SAMPLE)
    for t in ("tf32", "cudnn_benchmark", "half_precision", "channels_last", "streams", "cuda_graphs",
              "torch_compile", "inplace", "result_caching"):
        assert t in tags, t
    assert "custom_cuda" not in tags and "triton" not in tags


def test_ablation_transforms_switch_techniques_off():
    variants = {v.technique: v for v in plan(SAMPLE)}
    for tech in ("tf32", "cudnn_benchmark", "half_precision", "channels_last", "streams", "torch_compile", "inplace"):
        v = variants[tech]
        assert v.switchable and v.edits >= 1, tech
        compile(v.source, f"<{tech}>", "exec")  # still valid Python
        assert tech not in detect(v.source), tech  # what the transform removed is no longer detected
    assert "allow_tf32 = False" in variants["tf32"].source
    assert "torch.cuda.Stream(" not in variants["streams"].source and "nullcontext" in variants["streams"].source
    assert "y = y.relu()" in variants["inplace"].source
    assert (".half()" not in variants["half_precision"].source
            and "torch.float16" not in variants["half_precision"].source)
    assert "torch.contiguous_format" in variants["channels_last"].source
    # a hand-written graph capture and result caching cannot be switched off: said so, with a reason
    assert not variants["result_caching"].switchable and variants["result_caching"].reason
    graphs = TRANSFORMS["cuda_graphs"](SAMPLE)
    assert graphs.edits == 0 and "hand-written" in graphs.notes[0]
    assert not variants["cuda_graphs"].switchable
    # make_graphed_callables and a reduce-overhead compile are rewritable
    g = TRANSFORMS["cuda_graphs"]("import torch\nm = torch.cuda.make_graphed_callables(net, (x,))\n"
                                  "f = torch.compile(g, mode='reduce-overhead')\n")
    assert g.edits == 2 and "m = net" in g.source and "reduce-overhead" not in g.source


# -- a full report from stored evaluations --------------------------------------------------------------------
SUITE = {1: ["02_Softmax", "09_Swish", "11_ELU"], 2: ["01_Gemm_Scale_ResidualAdd", "08_Elementwise_Chain"],
         3: ["01_MLPBlock"]}


def make_suite(root: Path) -> Path:
    for lvl, names in SUITE.items():
        (root / f"level{lvl}").mkdir(parents=True)
        for n in names:
            shutil.copy(BUILTIN / f"level{lvl}" / f"{n}.py", root / f"level{lvl}" / f"{n}.py")
    return root


def _res(ok, speedup, custom=None, error=None, device="cpu-test", flags=()):
    return {"executable": ok, "correct": ok, "speedup": speedup, "flags": list(flags), "error": error,
            "timing": {"rounds": 10}, "evaluator_version": "test-1", "device_type": device,
            "custom_kernel_built": custom}


def fill_store(store, suite_dir: Path) -> None:
    from kernelrl.tasks import load_suite

    tid = {t.name: store.upsert_task(t) for t in load_suite(str(suite_dir))}

    def add(task, code, stage, result, purpose="final", run="r1"):
        cid = store.add_candidate(tid[task], code, origin_stage=stage, run_name=run)
        store.add_evaluation(cid, result, {"budget_s": 1.0}, purpose=purpose)

    add("02_Softmax", "class ModelNew: pass  # augment\n", "augment", _res(True, 1.5))
    add("02_Softmax", "import triton\nclass ModelNew: pass  # crl\n", "crl", _res(True, 3.0, custom=True))
    add("09_Swish", "class ModelNew: pass  # broken\n", "crl", _res(False, 0.0, error="output mismatch"))
    add("11_ELU", "class ModelNew: pass  # selfsup\n", "selfsup", _res(True, 0.8))
    add("01_Gemm_Scale_ResidualAdd", "class ModelNew: pass\nw = self.linear.weight * 2\n", "crl", _res(True, 2.0))
    add("08_Elementwise_Chain", "class ModelNew: pass  # reward only\n", "crl", _res(True, 9.0), purpose="reward")
    add("01_MLPBlock", "class ModelNew: pass  # mlp\n", "crl", _res(True, 1.2, custom=False))
    add("01_MLPBlock", "class ModelNew: pass  # other run\n", "crl", _res(True, 50.0), run="r2")
    # a kernel whose latest final score failed (re-verification) must not be picked on its older success
    add("11_ELU", "class ModelNew: pass  # flaky\n", "crl", _res(True, 5.0))
    add("11_ELU", "class ModelNew: pass  # flaky\n", "crl", _res(False, 0.0, flags=["reverify_mismatch"]))


def test_full_report_from_stored_evaluations(store, tmp_path):
    from kernelrl.reports.plots import DPI, PANEL_H, PANEL_W, histogram_figure
    from kernelrl.reports.runner import BenchOptions, run_bench

    suite = make_suite(tmp_path / "suite")
    fill_store(store, suite)
    out = tmp_path / "report"
    opts = BenchOptions(suite=str(suite), sources=["r1/crl", "r1/augment+selfsup", "run:r1"],
                        labels=["stage 3", "stages 1+2"], stored=True, out=out, title="stored test")
    report, paths = run_bench(opts, store)
    labels = [s.label for s in report.sources]
    assert labels == ["stage 3", "stages 1+2", "r1"]
    summ = report.summaries()
    crl = summ["stage 3"]["all"]  # Softmax 3.0, Gemm 2.0, MLP 1.2; Swish failed, ELU flaky, Elementwise reward-only
    assert (crl.n, crl.success, crl.faster, crl.max) == (6, 3, 3, 3.0)
    assert crl.mean == pytest.approx((3.0 + 2.0 + 1.2) / 6)
    assert crl.p50 == pytest.approx((1.2 + 0) / 2) and crl.geomean == pytest.approx((3.0 * 2.0 * 1.2) ** (1 / 3))
    assert crl.custom_kernels == 1 and crl.custom_share == pytest.approx(1 / 3)
    early = summ["stages 1+2"]
    assert (early["all"].success, early["L1"].mean, early["L2"].success) == (2, pytest.approx((1.5 + 0.8) / 3), 0)
    whole = summ["r1"]["all"]
    assert whole.success == 4 and whole.max == 3.0  # r2's 50x is another run's
    rows = {r["task"]: r for r in report.sources[0].rows}
    assert (rows["09_Swish"]["success"] is False
            and rows["01_Gemm_Scale_ResidualAdd"]["techniques"] == ["weight_folding"])

    # files: Markdown tables, CSV of every row, JSON that loads back with the same statistics, PNGs
    md = paths["markdown"].read_text()
    for heading in ("## Overall", "## Level 1", "## Level 2", "## Level 3", "## Per task", "## Techniques",
                    "## Unsuccessful", "## Definitions", "hist_log_speedup.png"):
        assert heading in md, heading
    assert "| stage 3 | 6 | 1.03 | 3.00 |" in md
    csv_lines = paths["csv"].read_text().strip().splitlines()
    assert len(csv_lines) == 1 + 3 * 6 and csv_lines[0].startswith("source,task_key,task,level")
    again = Report.load(paths["json"])
    assert again.summaries()["stage 3"]["all"] == crl
    data = json.loads(paths["json"].read_text())
    assert data["summaries"]["r1"]["L3"]["mean"] == pytest.approx(1.2)
    h = data["log_speedup_histograms"]["stage 3"]["L1"]  # Softmax ln 3.0 = 1.10 -> bin [1.0, 1.25)
    assert sum(h["counts"]) == 1 and h["unsuccessful"] == 2 and h["counts"][h["edges"].index(1.0)] == 1

    fig = histogram_figure(report)
    assert len(fig.axes) == 3  # one panel per level
    assert [a.get_title() for a in fig.axes] == ["Level 1", "Level 2", "Level 3"]
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt

    plt.close(fig)
    for key in ("hist", "profile"):
        assert paths[key].stat().st_size > 5000
        img = mpimg.imread(paths[key])
        assert img.shape[:2] == (round(PANEL_H * DPI), round(3 * PANEL_W * DPI))
        assert img[..., :3].std() > 0.01  # not a blank canvas


def test_compare_and_kernel_unit_sources(tmp_path):
    from kernelrl.reports.report import SourceResult

    rows_a = [make_row(source="a", task_key=f"s/L1/t{i}", task=f"t{i}", level=1, code=None,
                       result=_res(True, 1.0 + i)) for i in range(3)]
    rep_a = Report("A", [SourceResult("a", "seeds", rows_a)], levels=[1])
    pa = rep_a.write(tmp_path / "a", plots=False)
    assert "json" in pa and "hist" not in pa
    rows_b = [make_row(source="a", task_key="s/L1/t0", task="t0", level=1, code=None, variant=v,
                       result=_res(ok, 2.0)) for v, ok in (("x", True), ("y", False))]
    rep_b = Report("B", [SourceResult("a", "seeds:all", rows_b, unit="kernel")], levels=[1])
    rep_b.add_compared(Report.load(pa["json"]), "a/report.json")
    assert [s.label for s in rep_b.sources] == ["a", "a (2)"]
    pb = rep_b.write(tmp_path / "b")
    md = pb["markdown"].read_text()
    assert "## Every kernel: a" in md and "from a/report.json" in md
    assert rep_b.summaries()["a (2)"]["all"].mean == pytest.approx(2.0)
    from kernelrl.errors import KernelRLError

    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(KernelRLError, match="not a kernelrl report"):
        Report.load(tmp_path / "bad.json")


def test_eager_estimate_beside_the_score_and_old_reports_unchanged(tmp_path):
    """Issue 32: the evaluator's eager estimate (timing.eager, report-only) is summarised over the successful tasks
    that have one (never as 0), shown beside each score in labelled columns; a report without it reads as before."""
    from kernelrl.reports.report import SourceResult

    def res(ok, speedup, eager=None, device="NVIDIA H100 80GB HBM3"):
        r = _res(ok, speedup, device=device)
        if eager is not None:
            r["timing"]["eager"] = {"ref_ms": 0.04, "cand_ms": 0.04 / eager, "speedup": eager}
        return r

    s = stats.summarize([2.0, 3.0, 1.0, 5.0], [True, True, False, True], eager=[1.5, None, 9.0, 0.5])
    assert (s.eager_n, s.eager_mean, s.eager_median) == (2, 1.0, 1.0)  # 9.0 failed, None has no estimate
    assert stats.summarize([2.0]).eager_n == 0 and stats.summarize([2.0]).eager_mean is None
    rows = [make_row(source="gpu", task_key=f"s/L1/t{i}", task=f"t{i}", level=1, code=None, result=r)
            for i, r in enumerate([res(True, 2.0, 1.5), res(True, 3.0), res(False, 0.0, 9.0)])]
    assert [r["eager_speedup"] for r in rows] == [1.5, None, None]  # a failed kernel's estimate is not shown
    assert rows[0]["eager_ref_ms"] == 0.04 and rows[0]["eager_cand_ms"] == pytest.approx(0.04 / 1.5)
    old = [make_row(source="old", task_key=f"s/L1/t{i}", task=f"t{i}", level=1, code=None,
                    result=_res(True, 2.0, device="cpu")) for i in range(3)]
    md = Report("R", [SourceResult("gpu", "x", rows), SourceResult("old", "y", old)], levels=[1]).write(
        tmp_path / "a", plots=False)["markdown"].read_text()
    head = next(line for line in md.splitlines() if line.startswith("| task | level |"))
    assert head == ("| task | level | gpu: speedup (reward clock: GPU time, launch overhead removed) | gpu: eager est. "
                    "(host included, KernelBench-style) | old: speedup (reward clock: CPU wall time, harness overhead "
                    "removed) |"), head
    assert "| t0 | 1 | 2.00 | 1.50 | 2.00 |" in md and "| t1 | 1 | 3.00 | - | 2.00 |" in md, md
    overall = next(line for line in md.splitlines() if line.startswith("| gpu | 3 |"))
    assert overall.endswith("| 1.50 (n=1) | 1.50 |"), overall
    assert "never rewarded" in md and "**eager est.**" in md
    plain = Report("R", [SourceResult("old", "y", old)], levels=[1]).write(tmp_path / "b", plots=False)
    text = plain["markdown"].read_text()
    assert "| task | level | old |" in text and "eager est. mean" not in text and "eager est. (" not in text
    kernels = Report("K", [SourceResult("gpu", "x", rows, unit="kernel")], levels=[1]).write(
        tmp_path / "c", plots=False)["markdown"].read_text()
    assert ("| task | level | kernel | speedup (reward clock: GPU time, launch overhead removed) | eager est. (host "
            "included, KernelBench-style) | success |") in kernels, kernels


# -- sources --------------------------------------------------------------------------------------------------
def test_json_and_directory_sources(tmp_path):
    from kernelrl.errors import KernelRLError
    from kernelrl.reports.sources import from_directory, from_json, resolve
    from kernelrl.tasks import load_suite

    tasks = load_suite(str(make_suite(tmp_path / "suite")))
    code = "class ModelNew:\n    pass\n"
    (tmp_path / "map.json").write_text(json.dumps({"02_Softmax": code, "Swish": code, "nope": code}))
    picks, notes = from_json(tmp_path / "map.json", tasks)
    assert sorted(p.task.name for p in picks) == ["02_Softmax", "09_Swish"] and "1 records" in notes[0]
    # CUDA-L1-style records: level + problem number, code under custom_code
    recs = [{"level_id": 1, "task_id": 11, "custom_code": code}, {"level_id": 2, "task_id": 8, "custom_code": code},
            {"level_id": 3, "task_id": 99, "custom_code": code}, {"level_id": 1, "task_id": 2}]
    (tmp_path / "rel.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    picks, notes = from_json(tmp_path / "rel.jsonl", tasks)
    assert [p.task.name for p in picks] == ["11_ELU", "08_Elementwise_Chain"]
    assert any("no code" in n for n in notes)
    d = tmp_path / "kernels"
    (d / "level3").mkdir(parents=True)
    (d / "02_Softmax.py").write_text(code)
    (d / "level3" / "01_MLPBlock.py").write_text(code)
    (d / "README.py").write_text(code)
    picks, notes = from_directory(d, tasks)
    assert sorted(p.task.name for p in picks) == ["01_MLPBlock", "02_Softmax"] and "README.py" in notes[0]
    with pytest.raises(KernelRLError, match="no such file"):
        resolve(str(tmp_path / "x.json"), tasks)
    with pytest.raises(KernelRLError, match="needs the store"):
        resolve("some-run", tasks, store=None)
    seeds = resolve("seeds", tasks, device_kind="cpu")
    assert seeds.reduce == "best" and all(p.source and "expect wrong" not in p.note for p in seeds.picks)
    assert any("CUDA/Triton seeds skipped" in n for n in seeds.notes)
    every = resolve("seeds:all", tasks, device_kind="cuda")
    assert every.unit == "kernel" and len(every.picks) > len(seeds.picks)
    # rank 0 of every task comes from an 'expect: faster' seed where the task has one
    first = {p.task.name: p for p in every.picks if p.rank == 0}
    assert first["02_Softmax"].note.startswith("expect faster")


def test_store_source_errors(store, tmp_path):
    from kernelrl.errors import KernelRLError
    from kernelrl.reports.sources import resolve
    from kernelrl.tasks import load_suite

    tasks = load_suite(str(make_suite(tmp_path / "suite")))
    fill_store(store, tmp_path / "suite")
    with pytest.raises(KernelRLError, match="not 'seeds'"):
        resolve("no-such-run", tasks, store=store)
    with pytest.raises(KernelRLError, match="no run 'ghost'"):
        resolve("ghost/crl", tasks, store=store)
    r = resolve("crl", tasks, store=store)  # a bare stage: every run
    mlp = [p for p in r.picks if p.task.name == "01_MLPBlock"]
    assert len(mlp) == 1 and "other run" in mlp[0].source
    r1 = resolve("crl", tasks, store=store, run="r1", top_k=2)
    assert {p.task.name for p in r1.picks} >= {"02_Softmax", "01_MLPBlock"}
    assert not any("flaky" in p.source for p in r1.picks)  # its latest evaluation failed


# -- Prefect artifacts (outside a run: no-op) and the CLI -----------------------------------------------------
def test_artifacts_are_a_noop_outside_prefect(tmp_path):
    from kernelrl.reports import artifacts
    from kernelrl.reports.report import SourceResult

    rep = Report("Some Title!", [SourceResult("a", "seeds", [make_row(source="a", task_key="k", task="t", level=1,
                                                                       result=_res(True, 2.0), code=None)])])
    assert not artifacts.in_prefect_run()
    assert artifacts.publish(rep) == []
    assert artifacts.artifact_key("Some Title! (L1)") == "some-title-l1"
    recs = artifacts.task_records(rep)
    assert recs[0]["speedup"] == 2.0 and recs[0]["success"] is True


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=120)


def test_cli_bench_stored_and_errors(tmp_path):
    from kernelrl.store import Store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    st = Store(url)
    st.upgrade()
    suite = make_suite(tmp_path / "suite")
    fill_store(st, suite)
    st.engine.dispose()
    out = tmp_path / "out"
    r = _cli("bench", "--suite", str(suite), "--source", "r1/crl", "--stored", "--out", str(out), "--store-url", url,
             "--json", "--no-plots")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["summaries"]["r1/crl"]["all"]["success"] == 3 and (out / "report.md").exists()
    # the console table, piped, keeps whole labels (rich fitted 80 columns and printed "torch.c…")
    long = "torch.compile reduce-overhead of the crl stage"
    r = _cli("bench", "--suite", str(suite), "--source", "r1/crl", "--label", long, "--stored", "--out", str(out),
             "--store-url", url, "--no-plots")
    assert r.returncode == 0, r.stderr
    assert any(long in line and line.rstrip().endswith("│") for line in r.stdout.splitlines()), r.stdout
    r = _cli("bench", "--suite", str(suite), "--source", "ghost-run", "--stored", "--out", str(out), "--store-url", url)
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _cli("bench", "--levels", "x", "--store-url", url)
    assert r.returncode == 2 and "--levels" in r.stderr
    r = _cli("bench", "ablations")
    assert r.returncode == 0 and "crl.prompt=plain" in r.stdout and "crl.sampler.kind=island" in r.stdout


def test_reference_baselines_are_the_reference_itself_wrapped(tmp_path):
    """baseline:compile / compile-reduce-overhead / cuda-graph (issue 32): the task's own source plus a ModelNew
    wrapper, so the parameters are the reference's; the CUDA graph is CUDA only (no row scored on a CPU); an
    unknown baseline is a clear error. (Scored on the GPU: bench/results; here the sources themselves.)"""
    import importlib.util

    import torch

    from kernelrl.errors import KernelRLError
    from kernelrl.reports.sources import resolve
    from kernelrl.tasks import get_task

    task = get_task("09_Swish")
    for spec, variant, mode in [("baseline:compile", "torch.compile", "None"),
                                ("baseline:compile-reduce-overhead", "torch.compile reduce-overhead",
                                 "'reduce-overhead'")]:
        src = resolve(spec, [task], device_kind="cpu")
        [pick] = src.picks
        assert src.label == variant and pick.origin == "baseline" and pick.source.startswith(task.source.rstrip())
        assert f"_kr_torch.compile(super().forward, mode={mode})" in pick.source
        # inductor's CUDA graphs overwrite their outputs at the next replay: a new step and cloned outputs
        assert ("cudagraph_mark_step_begin()" in pick.source) == (mode != "None")
        path = tmp_path / f"{spec.replace(':', '_')}.py"
        path.write_text(pick.source)
        spec_ = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(mod)
        assert issubclass(mod.ModelNew, mod.Model) and callable(mod.ModelNew()._kr_forward)
    # the CUDA graph wrapper: on CPU tensors it is the reference (the fallback); on a CPU device no row is scored
    src = resolve("baseline:cuda-graph", [task], device_kind="cuda")
    path = tmp_path / "graph.py"
    path.write_text(src.picks[0].source)
    spec_ = importlib.util.spec_from_file_location("graph", path)
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    x = torch.randn(4, 8)
    assert torch.equal(mod.ModelNew()(x), mod.Model()(x))
    cpu = resolve("baseline:cuda-graph", [task], device_kind="cpu")
    assert cpu.picks[0].source is None and cpu.missing == "CUDA only" and "needs a CUDA device" in cpu.notes[0]
    with pytest.raises(KernelRLError, match="unknown baseline; one of baseline:compile"):
        resolve("baseline:compile-max", [task], device_kind="cpu")
    me = resolve("baseline:self", [task], device_kind="cpu")  # the self-pair: the reference unchanged
    path = tmp_path / "self.py"
    path.write_text(me.picks[0].source)
    spec_ = importlib.util.spec_from_file_location("self_pair", path)
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    assert me.label == "the reference itself" and mod.ModelNew.forward is mod.Model.forward


@pytest.mark.gpu
def test_the_reduce_overhead_baseline_is_scored_on_a_gpu():
    """On the H200 (2026-11-29) every reduce-overhead row failed: inductor's CUDA graphs overwrote the outputs the
    evaluator kept across calls ("accessing tensor output of CUDAGraphs that has been overwritten"), and one
    worker died reading them. The wrapper now starts a step each call and clones its outputs."""
    from kernelrl.config.stages import EvalConfig
    from kernelrl.evaluation import evaluate
    from kernelrl.reports.sources import resolve
    from kernelrl.tasks import get_task

    task = get_task("09_Swish")
    [pick] = resolve("baseline:compile-reduce-overhead", [task], device_kind="cuda").picks
    r = evaluate(task, pick.source, EvalConfig(device="cuda", budget_s=0.5, correctness_trials=4, max_wall_s=300))
    assert r.success and r.speedup > 0 and r.timing.get("first_call_s") is not None, r.to_dict()


@pytest.mark.gpu
def test_a_compiled_scalar_task_does_not_recompile_while_timed(tmp_path):
    """KernelBench L1 5 (``A * s``, ``s = 3.14``) under reduce-overhead timed out on the H200 with leftover processes:
    correctness had passed ``s`` as a 0-d tensor and the timed calls as a float, so dynamo's guard on its type failed
    and inductor recompiled inside the timed phase (py-spy, bench/results/2026-11-28-h200x4-kernelbench/raw/c26).
    Since version 16 both pass the float."""
    from kernelrl.config.stages import EvalConfig
    from kernelrl.evaluation import evaluate
    from kernelrl.reports.sources import resolve
    from kernelrl.tasks.loader import load_task_file
    from tests.test_evaluator import SCALAR_TASK

    (tmp_path / "scalar.py").write_text(SCALAR_TASK.replace("torch.rand(64, 32)", "torch.rand(4096, 1024)"))
    task = load_task_file(tmp_path / "scalar.py")
    for spec in ("baseline:compile", "baseline:compile-reduce-overhead"):
        [pick] = resolve(spec, [task], device_kind="cuda").picks
        r = evaluate(task, pick.source, EvalConfig(device="cuda", budget_s=0.5, correctness_trials=4, max_wall_s=300))
        assert r.success and not {"timeout", "leftover-processes"} & set(r.flags), (spec, r.to_dict())


STATEFUL_RNN_TASK = """import torch
import torch.nn as nn

batch_size = 4096


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))  # a plain attribute, rebound by every forward
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x, initial_hidden=None):
        if initial_hidden is not None:
            self.hidden.copy_(initial_hidden)
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.h2o(self.hidden)


def get_inputs():
    return [torch.rand(batch_size, 64), torch.rand(batch_size, 1024)]


def get_init_inputs():
    return [64, 1024, 256]
"""


@pytest.mark.gpu
def test_the_cuda_graph_baseline_keeps_a_rebound_state_alive(tmp_path):
    """KernelBench L3 33_VanillaRNN (copy the given hidden state into ``self.hidden``, then rebind ``self.hidden``)
    failed the CUDA-graph baseline with an illegal memory access (H100, 2026-12-07 c22): the graph writes into the
    tensor ``self.hidden`` held at capture, which nothing kept. Here its 16 MiB has a segment of its own, so
    returning cached memory to the driver unmaps it: without the wrapper's held tensors the replay after
    ``empty_cache`` writes there. In a subprocess (an illegal address ends a process's CUDA context); then through
    the evaluator."""
    import subprocess
    import sys

    from kernelrl.config.stages import EvalConfig
    from kernelrl.evaluation import evaluate
    from kernelrl.reports.sources import resolve
    from kernelrl.tasks.loader import load_task_file

    (tmp_path / "rnn.py").write_text(STATEFUL_RNN_TASK)
    task = load_task_file(tmp_path / "rnn.py")
    [pick] = resolve("baseline:cuda-graph", [task], device_kind="cuda").picks
    (tmp_path / "graph.py").write_text(pick.source)
    code = f"""
import importlib.util, torch
spec = importlib.util.spec_from_file_location("graph", {str(tmp_path / "graph.py")!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(0); ref = m.Model(*m.get_init_inputs()).cuda()
torch.manual_seed(0); new = m.ModelNew(*m.get_init_inputs()).cuda()
x, h = (t.cuda() for t in m.get_inputs())
new(x, h); torch.cuda.synchronize(); torch.cuda.empty_cache()
got = new(x, h); torch.cuda.synchronize()
want = ref(x, h)
assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max().item()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
    res = evaluate(task, pick.source, EvalConfig(device="cuda", budget_s=0.5, correctness_trials=4, max_wall_s=300))
    assert res.success and res.speedup > 0, res.to_dict()


def test_bench_scores_every_source_of_a_task_before_the_next_task():
    """A bench cut short by --max-minutes keeps paired rows: task by task, each with every source (c19 on one GPU
    got 26 torch.compile rows and no reduce-overhead row when sources went one over all tasks)."""
    from kernelrl.reports.runner import scoring_order
    from kernelrl.reports.sources import resolve
    from kernelrl.tasks import load_suite

    tasks = load_suite("builtin", [1])[:3]
    resolved = [resolve(spec, tasks, device_kind="cpu") for spec in
                ("baseline:compile", "baseline:compile-reduce-overhead", "baseline:self")]
    order = [(resolved[si].picks[pi].task.key, resolved[si].label) for _, si, pi in scoring_order(resolved, tasks)]
    assert order == [(t.key, rs.label) for t in tasks for rs in resolved]


def test_bench_estimate_names_where_the_kernels_go(caplog):
    """The estimate line says the device for in-process workers and the workers' GPUs for a fleet (the GPU bench
    stage said "on cuda:0" while its kernels went to the evaluators on GPUs 1-3)."""
    import logging

    from kernelrl.config.stages import EvalConfig
    from kernelrl.reports.progress import BenchProgress

    cfg = EvalConfig(device="cpu", budget_s=0.2, correctness_trials=2)
    with caplog.at_level(logging.WARNING):
        BenchProgress(3, cfg).announce()
        BenchProgress(3, cfg, local_workers=0).announce()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("bench: 3 kernels")]
    assert lines[0].startswith("bench: 3 kernels on cpu, 0.2 s") and len(lines) == 2
    assert lines[1].startswith("bench: 3 kernels on the evaluator workers (cpu jobs), 0.2 s")
