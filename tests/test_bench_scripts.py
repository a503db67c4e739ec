"""The GPU session's bench scripts, smoke-run on a CPU: they must work before device time is spent on them
(bench/gpu_session.sh runs them on the H100; a broken script there costs a call)."""

from __future__ import annotations

import gzip
import json
import random

import pytest

import torch

from bench.evaluator_bench import bench_task, pick_seed
from kernelrl.config.stages import EvalConfig
from kernelrl.tasks import get_task

CPU = EvalConfig(device="cpu", budget_s=0.1, correctness_trials=1, reverify=False, max_wall_s=90,
                 spread_threshold=10.0, memory_limit_mb=4096)


def test_evaluator_bench_times_the_repeats_then_one_long_run_without_early_stop(monkeypatch):
    """The repeats use the settings as given; the long run (the reference value) long_factor x their timing, no
    early stop; none with long_factor 0. (The --fix-k experiment went with EvalConfig.calls_per_span, issue 34.)"""
    import bench.evaluator_bench as eb

    seen = []

    def fake_one(task, source, cfg):
        seen.append((cfg.budget_s, cfg.target_ci))
        return {"success": True, "k": 37, "timing_s": 0.1, "score_raw": 2.0}

    monkeypatch.setattr(eb, "one", fake_one)
    task = get_task("09_Swish")
    row = bench_task(task, pick_seed(task, "cpu"), CPU, repeats=3, long_factor=2.0)
    assert "error" not in row, row.get("error")
    assert seen == [(0.1, CPU.target_ci)] * 3 + [(1.0, 0.0)] and "long" in row  # 3 repeats, then the long run
    seen.clear()
    bench_task(task, pick_seed(task, "cpu"), CPU, repeats=2, long_factor=0.0)
    assert seen == [(0.1, CPU.target_ci)] * 2


def test_set_overrides_any_evalconfig_knob_with_its_type_and_refuses_bad_ones():
    """--set KEY=VALUE (evaluator_bench, eval_one): a public knob without a new flag; a typo or a knob that is
    no longer one (issue 34) exits with the key's name instead of running a device call with the default."""
    import pytest

    from bench.evaluator_bench import apply_sets

    cfg = apply_sets(CPU, ["target_ci=0", "min_rounds=12", "cuda_graphs=false", "clock=host"])
    assert (cfg.target_ci, cfg.min_rounds, cfg.cuda_graphs, cfg.clock) == (0.0, 12, False, "host")
    assert cfg.budget_s == CPU.budget_s  # the rest untouched
    for bad in ("target_c=0", "target_ci", "min_rounds=two", "cuda_graphs=maybe", "graph_span_ms=12.5"):
        with pytest.raises(SystemExit, match="--set"):
            apply_sets(CPU, [bad])


def test_eval_one_drain_summary_groups_the_holders_waits_by_transition():
    from bench.eval_one import drain_summary

    raw = {"drains": [["stage", "ref", "cand:digest", 300.0, 290.0, 1],
                      ["stage", "ref", "cand:digest", 340.0, 310.0, 2], ["go", "cand", "ref:go", 100.0, 98.0, 1]]}
    s = drain_summary(raw)
    assert s["stage<ref after cand:digest"] == {"n": 2, "wait_med": 340.0, "wait_p90": 340.0, "first_med": 310.0,
                                                "multi": 0.5}
    assert s["go<cand after ref:go"]["n"] == 1 and drain_summary({}) == {}


def test_spare_pool_starts_replacements_on_as_many_threads_as_configured():
    """SPARE_STARTERS (EvalConfig.spare_starters before issue 34): a held evaluation takes three spares; with 3
    starter threads their replacements start side by side (2 left one of three queued behind the others).
    Paused, so no worker starts."""
    from kernelrl.evaluation import session
    from kernelrl.evaluation.spares import Spares

    for starters in (2, 3):
        pool = Spares(per_key=1)
        pool.starters = starters
        pool.pause()
        try:
            for role in ("ref", "cand", "holder"):
                assert pool.take(role, {"device": "cpu"}) is None
            assert len(pool._threads) == starters and pool._todo.qsize() >= 3 - starters
        finally:
            pool.close_all()
    assert session.SPARE_STARTERS == 3


def test_gpu_session_runs_one_lane_per_gpu_within_the_deadline_and_packs_their_output(tmp_path):
    """bench/gpu_session.sh's lanes (laneN on cuda:N, in the background) and bench0, run on a CPU against a stand-in
    evaluator_bench.py in a copy of the script's tree: each gets its device and arguments, DEADLINE caps a lane that
    would run past it, everything lands in $OUT/bench.tgz, and the call ends with status 0 (the tenth session's
    calls on two H100s ran this way; a broken script there costs a device call)."""
    import os
    import subprocess
    import tarfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "bench").mkdir()
    (tmp_path / ".whl").mkdir()
    script = (root / "bench" / "gpu_session.sh").read_text()
    # no wheels to install here: the install line becomes a no-op (everything else runs as on the device)
    script = "\n".join("true \\" if line.startswith("python3 -m pip install") else line for line in script.splitlines())
    (tmp_path / "gpu_session.sh").write_text(script + "\n")
    (tmp_path / "bench" / "evaluator_bench.py").write_text(
        "import sys, time\nargs = sys.argv[1:]\nprint('args', args, flush=True)\n"
        "time.sleep(30 if '--slow' in args else 0.2)\nprint('done', flush=True)\n")
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), BENCH_WORK=str(tmp_path / "w"), DEADLINE="6",
               PARTS="lane1 lane2 bench0", LANE1_ARGS="--only 3", LANE2_ARGS="--slow", BENCH0_ARGS="--only 1,2")
    p = subprocess.run(["bash", "gpu_session.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    with tarfile.open(out / "bench.tgz") as tar:
        logs = {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    assert "'--device', 'cuda:1'" in logs["lane1.log"] and "'--only', '3'" in logs["lane1.log"]
    assert "done" in logs["lane1.log"]
    assert "'--device', 'cuda:2'" in logs["lane2.log"] and "done" not in logs["lane2.log"]  # stopped at DEADLINE
    assert "'--device', 'cuda:0'" in logs["bench0.log"] and "'--only', '1,2'" in logs["bench0.log"]
    assert "--no-prebuild" in logs["bench0.log"]
    assert sorted(os.listdir(out)) == ["bench.tgz", "env.txt"]  # the device returns at most 8 files


def test_kernelbench_summary_counts_self_pairs_failures_and_baselines():
    """bench/kernelbench_summary.py (issue 32 item 3) on a made-up report: the self-pairs within 2%, their fatal
    flags and failure causes, wall times over every evaluation, and the paper's table per baseline."""
    from bench.kernelbench_summary import SELF, summarise

    def row(key, level, speedup, success=True, flags=(), error=None, wall=10.0, first=None):
        return {"task_key": key, "level": level, "speedup": speedup if success else 0.0, "success": success,
                "flags": list(flags), "error": error, "evaluated": True, "wall_s": wall,
                "timing": {"first_call_s": first} if first else {}}

    me = [row("kb/L1/a", 1, 1.0), row("kb/L1/b", 1, 0.99), row("kb/L2/c", 2, 1.05),
          row("kb/L2/d", 2, 0.0, False, ["out-of-memory"], "CUDA out of memory", wall=70.0),
          row("kb/L3/e", 3, 0.0, False, ["timing-mismatch"], None)]
    comp = [row(r["task_key"], r["level"], 1.5, first=20.0) for r in me[:4]] + [row("kb/L3/e", 3, 0.5)]
    s = summarise({"sources": [{"label": SELF, "rows": me}, {"label": "torch.compile", "rows": comp}]})
    assert s["tasks"] == 5 and s["self_within_2pct"] == 0.4  # a and b; c is 5% off; d and e failed
    assert s["self_fatal_flags"] == 1 and list(s["self_fatal"]) == ["kb/L3/e"]
    assert s["failures"]["memory"]["tasks"] == ["kb/L2/d"] and s["failures"]["other"]["count"] == 1
    assert s["max_eval_wall_s"] == 70.0 and s["median_eval_wall_s"] == 10.0 and s["evaluations"] == 10
    b = s["baselines"]["torch.compile"]
    assert b["tables"]["all"]["n"] == 5 and b["tables"]["all"]["faster"] == 4 and b["first_call_s_median"] == 20.0
    assert b["tables"]["L3"]["mean"] == 0.5
    # baselines.md: the paper's table per baseline and level, each row saying how much of the table it covers
    from bench.kernelbench_summary import baselines_md
    md = baselines_md(s, {"sources": [{"label": SELF, "rows": me}, {"label": "torch.compile", "rows": comp}]})
    assert "launch overhead removed on both sides" in md and "0.400 within [0.98, 1.02]" in md
    assert "| torch.compile | all: 5 of 5 | 5 | 4 | 1.30 | 1.50 |" in md and "| 20.0 / 20.0 | - |" in md
    assert "| torch.compile | level 3: 1 of 1 | 1 | 0 | 0.50 |" in md
    # a host copy refused in a graph names "pinned memory": not an out-of-memory failure (L3 30 on the H200)
    from bench.kernelbench_summary import cause
    pinned = row("kb/L3/f", 3, 0.0, False, ["runtime-error"], "RuntimeError: Cannot copy between CPU and CUDA "
                 "tensors during CUDA graph capture unless the CPU tensor is pinned. Please use tensor.pin_memory()")
    assert cause(pinned).startswith("not capturable: ") and cause(me[3]) == "memory"
    wrong = row("kb/L2/h", 2, 0.0, False, ["wrong-output"], "correctness trial 1: output 0: 5009/2097152 elements")
    assert cause(wrong).startswith("wrong output: ")
    # a reference that ran out of memory after the candidate ran (flagged reference-disturbed): on a self-pair a
    # memory failure, not the evaluator disagreeing with itself (24 of level 1 on the H100 at version 22)
    oom = row("kb/L1/g", 1, 0.0, False, ["reference-disturbed"], "the reference failed on stage: OutOfMemoryError: "
              "CUDA out of memory. Tried to allocate 12.00 GiB (after the candidate ran)")
    s = summarise({"sources": [{"label": SELF, "rows": me + [oom]}]})
    assert s["self_fatal_flags"] == 1 and s["failures"]["memory"]["tasks"] == ["kb/L2/d", "kb/L1/g"]
    # tasks.md: per task the self-pair's version, spans a block and the workers' peak memory (merges span versions)
    from bench.kernelbench_summary import tasks_md
    big = dict(row("kb/L1/h", 1, 1.0), evaluator_version="kernelrl-eval-23",
               timing={"spans_per_block": 1, "peak_reserved_mib": {"ref": 12800, "cand": 13312}})
    md = tasks_md({"sources": [{"label": SELF, "rows": [big, row("kb/L1/a", 1, 1.0)]}]})
    assert "| kb/L1/h | 1.000 | 10.0 | 23 | 1 | 12.5/13.0 |" in md and "| kb/L1/a | 1.000 | 10.0 | - | - | - |" in md
    # the eager estimate beside a score where the evaluation measured one, labelled; the clock said above the table
    md = tasks_md({"sources": [{"label": SELF, "rows": [dict(row("kb/L1/a", 1, 1.0), eager_speedup=0.987)]}]})
    assert "| kb/L1/a | 1.000 (0.99 eager) | 10.0 |" in md and "launch overhead removed on both sides" in md
    # within 2% on the unrounded score: a report's speedup of 0.98 that is 0.97629 (H100, L1 34 at 23) is not within;
    # a capped score (task-input-independent: 1.0 of a raw 1.3) is judged as scored
    near = dict(row("kb/L1/i", 1, 0.98), score_raw=0.97629)
    capped = dict(row("kb/L1/j", 1, 1.0), timing={"score_raw": 1.3})
    # rounded toward 1, a score is up to 0.01 above its raw value (L1 93 at 24: 0.97336 read 0.98)
    toward = dict(row("kb/L1/k", 1, 0.98), score_raw=0.97336)
    s = summarise({"sources": [{"label": SELF, "rows": [near, capped, row("kb/L1/a", 1, 0.98), toward]}]})
    assert s["self_within_2pct"] == round(2 / 4, 4)
    assert "| kb/L1/i | 0.976 |" in tasks_md({"sources": [{"label": SELF, "rows": [near]}]})
    # a baseline's failures by cause: a task whose output is rounding (L2 23) named as such
    comp[4] = row("kb/L3/e", 3, 0.0, False, ["wrong-output", "reference-is-rounding"], "correctness trial 1: ...")
    s = summarise({"sources": [{"label": SELF, "rows": me}, {"label": "torch.compile", "rows": comp}]})
    assert s["baselines"]["torch.compile"]["failures"] == {"reference is rounding": {"count": 1,
                                                                                     "tasks": ["kb/L3/e"]}}


def test_kernelbench_summary_merges_lanes_and_lists_tasks_not_reached_apart():
    """One bench per GPU, each cut by --max-minutes: merged per source, an evaluated row wins over a not-evaluated
    one whichever report it is in, and tasks never reached are listed, not counted as failures."""
    from bench.kernelbench_summary import SELF, merge, summarise

    def row(key, speedup=1.0, evaluated=True):
        return {"task_key": key, "level": 1, "speedup": speedup if evaluated else 0.0, "success": evaluated,
                "flags": [], "error": None if evaluated else "not evaluated: the --max-minutes budget was spent",
                "evaluated": evaluated, "wall_s": 10.0 if evaluated else None, "timing": {}}

    lane0 = {"sources": [{"label": SELF, "rows": [row("kb/L1/a"), row("kb/L1/b", evaluated=False)]}]}
    lane1 = {"sources": [{"label": SELF, "rows": [row("kb/L1/b", 0.99), row("kb/L1/c", evaluated=False)]}]}
    later = {"sources": [{"label": SELF, "rows": [row("kb/L1/a", evaluated=False)]}]}
    lane0["sources"][0]["rows"][0]["evaluator_version"] = "kernelrl-eval-15"
    lane1["sources"][0]["rows"][0]["evaluator_version"] = "kernelrl-eval-16"
    s = summarise(merge([lane0, lane1, later]))
    assert s["tasks"] == 2 and s["self_within_2pct"] == 1.0 and s["failures"] == {}
    assert s["not_evaluated"] == ["kb/L1/c"] and s["evaluations"] == 2
    # a merge across a version bump says so (rows not evaluated are not counted)
    assert s["evaluator_versions"] == {"kernelrl-eval-15": 1, "kernelrl-eval-16": 1}


def test_kernelbench_summary_keeps_its_merged_rows_as_the_input_of_a_later_merge(tmp_path):
    """The lane reports of a call are not kept forever (c19's was lost): the summary writes the merged rows
    without code as rows.json.gz, which a later merge takes as a report; baseline lanes alone (no self-pairs) are
    summarised too, their self-pair figures None."""
    import subprocess
    import sys

    def row(key, speedup, evaluated=True, first=None):
        return {"task_key": key, "level": 1, "speedup": speedup if evaluated else 0.0, "success": evaluated,
                "flags": [], "error": None if evaluated else "not evaluated yet (partial report)", "code": "x" * 50,
                "evaluated": evaluated, "wall_s": 17.0 if evaluated else None,
                "timing": {"first_call_s": first} if first else {}}

    one = {"sources": [{"label": "torch.compile", "rows": [row("kb/L1/a", 1.3, first=2.0), row("kb/L1/b", 0, False)]},
                       {"label": "torch.compile reduce-overhead", "rows": [row("kb/L1/a", 1.1), row("kb/L1/b", 0,
                                                                                                    False)]}]}
    two = {"sources": [{"label": "torch.compile", "rows": [row("kb/L1/b", 0.9, first=4.0)]}]}
    (tmp_path / "one.json").write_text(json.dumps(one))
    (tmp_path / "two.json").write_text(json.dumps(two))
    script = [sys.executable, "bench/kernelbench_summary.py"]
    r = subprocess.run([*script, str(tmp_path / "one.json"), "--out", str(tmp_path / "s1")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    s1 = json.loads((tmp_path / "s1" / "summary.json").read_text())
    assert s1["tasks"] == 1 and s1["self_within_2pct"] is None and s1["not_evaluated"] == ["kb/L1/b"]
    kept = json.loads(gzip.decompress((tmp_path / "s1" / "rows.json.gz").read_bytes()))
    assert kept["inputs"] == [str(tmp_path / "one.json")] and "code" not in kept["sources"][0]["rows"][0]
    r = subprocess.run([*script, str(tmp_path / "s1" / "rows.json.gz"), str(tmp_path / "two.json"), "--out",
                        str(tmp_path / "s2")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    s2 = json.loads((tmp_path / "s2" / "summary.json").read_text())
    comp = s2["baselines"]["torch.compile"]
    assert s2["tasks"] == 2 and s2["not_evaluated"] == [] and comp["tables"]["all"]["n"] == 2
    assert comp["tables"]["all"]["mean"] == pytest.approx(1.1) and comp["first_call_s_median"] == 3.0
    assert s2["baselines"]["torch.compile reduce-overhead"]["tables"]["all"]["n"] == 1
    assert s2["devices"] == {"unknown": 3}  # rows that do not name their GPU
    # rows of two kinds of GPU make two tables: the merge is refused unless asked for
    for rep, dev in ((one, "NVIDIA H200"), (two, "NVIDIA H100 80GB HBM3")):
        for r in (r for src in rep["sources"] for r in src["rows"]):
            r["device_type"] = dev
    (tmp_path / "one.json").write_text(json.dumps(one))
    (tmp_path / "two.json").write_text(json.dumps(two))
    args = [*script, str(tmp_path / "one.json"), str(tmp_path / "two.json"), "--out", str(tmp_path / "s3")]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 2 and "2 kinds of device" in r.stderr and not (tmp_path / "s3").exists(), r.stderr
    r = subprocess.run([*args, "--mixed-devices"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    s3 = json.loads((tmp_path / "s3" / "summary.json").read_text())
    # torch.compile's b from two (its row in one was not evaluated), a of both sources from one
    assert s3["devices"] == {"NVIDIA H100 80GB HBM3": 1, "NVIDIA H200": 2}
    # --by-created: merged in the order the reports were made, whatever the order given (the later row wins)
    one["created"], two["created"] = "2026-12-07 04:54 UTC", "2026-12-07 01:45 UTC"
    for rep in (one, two):
        for r in (r for src in rep["sources"] for r in src["rows"]):
            r["device_type"] = "NVIDIA H100 80GB HBM3"
    two["sources"][0]["rows"].append(row("kb/L1/a", 0.5))  # made earlier than one's 1.3
    (tmp_path / "one.json").write_text(json.dumps(one))
    (tmp_path / "two.json").write_text(json.dumps(two))
    for flag, want in (([], 0.5), (["--by-created"], 1.3)):
        out = tmp_path / f"s4{len(flag)}"
        r = subprocess.run([*script, str(tmp_path / "one.json"), str(tmp_path / "two.json"), *flag, "--out",
                            str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        kept = json.loads(gzip.decompress((out / "rows.json.gz").read_bytes()))
        comp = next(s for s in kept["sources"] if s["label"] == "torch.compile")["rows"]
        assert next(x["speedup"] for x in comp if x["task_key"] == "kb/L1/a") == want, (flag, comp)
    assert kept["inputs"] == [str(tmp_path / "two.json"), str(tmp_path / "one.json")]  # in the order merged
    # an empty .gz (a lane that had no tasks, 2026-12-07 c16b) is named, not a traceback
    (tmp_path / "empty-report.json.gz").write_bytes(b"")
    r = subprocess.run([*script, str(tmp_path / "one.json"), str(tmp_path / "empty-report.json.gz"), "--out",
                        str(tmp_path / "s5")], capture_output=True, text=True)
    assert r.returncode == 2 and "empty-report.json.gz is not a readable report" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "s5").exists()


def _phase(name: str, workers: int, service: list, rate: float) -> dict:
    return {"phase": name, "workers": workers, "devices": [f"cuda:{i}" for i in range(workers)], "jobs": len(service),
            "finished": sum(s is not None for s in service), "service_s": service, "reverified": [],
            "reverified_on_other_gpu": 0, "partial": None in service, "wall_s": 1.0, "span_s": 1.0,
            "jobs_per_hour": rate, "per_worker_jobs": {"w": 1}, "success": 1, "failed_jobs": 0}


def test_service_bench_joins_a_single_and_a_multi_run_of_the_same_batch_and_refuses_different_batches(tmp_path):
    """The fleet benchmark's two phases may run in separate device calls (the 1-GPU phase beside a pipeline run):
    --combine takes the single phase of one report and the multi phase of the other, with the scaling keys."""
    import json

    from bench.service_bench import combine

    settings = {"budget_s": 0.5, "correctness_trials": 5, "reverify": True, "reverify_above": 3.0,
                "max_extension_seeds": 3, "concurrent": False}
    base = {"date": "d", "host": "h", "n_candidates": 3, "n_tasks": 2, "warm": True, "settings": settings,
            "candidates": ["a/x", "b/y", "a/z"], "warmup": {"ok": 1, "candidates_with_builds": 1, "seconds": 2.0}}
    single = dict(base, command="--only-single", devices=["cuda:3"], device_names=["H"],
                  phases=[_phase("single", 1, [2.0, 4.0, 3.0], 100.0)], reverify={"ran": False, "why": "-"})
    multi = dict(base, command="--skip-single", devices=["cuda:1", "cuda:2", "cuda:3"], device_names=["H"] * 3,
                 phases=[_phase("multi", 3, [2.2, 4.4, 3.3], 290.0)], reverify={"ran": False, "why": "-"})
    (tmp_path / "s.json").write_text(json.dumps(single))
    (tmp_path / "m.json").write_text(json.dumps(multi))
    out = tmp_path / "fleet.json"
    assert combine(str(tmp_path / "s.json"), str(tmp_path / "m.json"), out=str(out)) == 0
    r = json.loads(out.read_text())
    assert [p["phase"] for p in r["phases"]] == ["single", "multi"]
    assert r["scaling"] == 2.9 and r["scaling_target"] == 2.7 and r["settings"]["separate_runs"] is True
    assert r["same_jobs"]["jobs"] == 3 and r["same_jobs"]["scaling_same_jobs"] == round(3 * 3.0 / 3.3, 3)
    assert "separate runs" in r["markdown"] and "**Scaling: 2.9x**" in r["markdown"]
    # the reports' order matters, and so do their batches
    assert combine(str(tmp_path / "m.json"), str(tmp_path / "s.json"), out=None) == 2
    (tmp_path / "m.json").write_text(json.dumps(dict(multi, candidates=["a/x", "b/y", "b/w"])))
    assert combine(str(tmp_path / "s.json"), str(tmp_path / "m.json"), out=None) == 2


def test_service_bench_joins_single_parts_of_one_batch_in_batch_order(tmp_path):
    """A 1-GPU phase too long for one device call runs as --only-single --part 1/2 and 2/2 (every 2nd candidate
    from the 1st and from the 2nd); --combine joins them: jobs and busy time summed, service seconds back in batch
    order, and refuses a missing part or parts of another batch."""
    import json

    from bench.service_bench import combine

    settings = {"budget_s": 0.5, "correctness_trials": 5, "reverify": True, "reverify_above": 3.0,
                "max_extension_seeds": 3, "concurrent": False}
    batch = ["a/x", "b/y", "a/z", "b/w", "a/v"]
    base = {"date": "d", "host": "h", "n_tasks": 2, "warm": True, "settings": settings, "batch": batch,
            "devices": ["cuda:3"], "device_names": ["H"], "reverify": {"ran": False, "why": "-"}}

    def part(k, service, span):
        ph = dict(_phase("single", 1, service, None), span_s=span, jobs_per_hour=len(service) / span * 3600)
        return dict(base, command=f"--only-single --part {k}/2", part=[k, 2], candidates=batch[k - 1::2],
                    n_candidates=len(service), phases=[ph])

    (tmp_path / "p2.json").write_text(json.dumps(part(2, [20.0, 40.0], 60.0)))  # b/y, b/w
    (tmp_path / "p1.json").write_text(json.dumps(part(1, [10.0, 30.0, 50.0], 90.0)))  # a/x, a/z, a/v
    multi = dict(base, command="--skip-single", devices=["cuda:1", "cuda:2", "cuda:3"], device_names=["H"] * 3,
                 candidates=batch, n_candidates=5, phases=[_phase("multi", 3, [11.0, 21.0, 31.0, 41.0, 51.0], 324.0)])
    multi.pop("batch")
    (tmp_path / "m.json").write_text(json.dumps(multi))
    out = tmp_path / "fleet.json"
    files = [str(tmp_path / f) for f in ("p2.json", "p1.json", "m.json")]  # any order of the parts
    assert combine(*files, out=str(out)) == 0
    r = json.loads(out.read_text())
    single = r["phases"][0]
    assert single["service_s"] == [10.0, 20.0, 30.0, 40.0, 50.0] and single["finished"] == 5 and single["parts"] == 2
    assert single["span_s"] == 150.0 and single["jobs_per_hour"] == 120.0  # 5 jobs in 150 s of busy time
    assert r["scaling"] == 2.7 and r["same_jobs"]["jobs"] == 5 and len(r["runs"]) == 3
    assert combine(files[0], files[2], out=None) == 2  # part 1 missing
    (tmp_path / "p1.json").write_text(json.dumps(dict(part(1, [10.0, 30.0, 50.0], 90.0), batch=batch[::-1])))
    assert combine(*files, out=None) == 2  # a part of another batch
    import pytest

    from bench.service_bench import main

    for bad in (["--part", "3/2", "--only-single"], ["--part", "1/2"], ["--part", "x", "--only-single"]):
        with pytest.raises(SystemExit):  # refused before anything starts
            main(["--gpus", "cpu", *bad])


def test_kernelbench_sizes_measures_a_problem_on_meta_and_reports_what_it_cannot(tmp_path):
    """bench/kernelbench_sizes.py: shapes and bytes from the meta device, without allocating (a 16 GiB input)."""
    from bench.kernelbench_sizes import measure, summarize

    lv = tmp_path / "level1"
    lv.mkdir()
    (lv / "1_Big.py").write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, n):\n"
        "        super().__init__()\n        self.w = nn.Parameter(torch.ones(n))\n"
        "    def forward(self, x):\n        return torch.softmax(x * self.w, dim=1)\n\n"
        "def get_inputs():\n    return [torch.rand(65536, 65536)]\n\ndef get_init_inputs():\n    return [65536]\n")
    (lv / "2_Item.py").write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x * float(x.sum().item())\n\n"
        "def get_inputs():\n    return [torch.rand(4, 4)]\n\ndef get_init_inputs():\n    return []\n")
    big, item = measure(lv / "1_Big.py"), measure(lv / "2_Item.py")
    assert big["input_bytes"] == big["output_bytes"] == 16 * 1024**3 and big["param_bytes"] == 4 * 65536
    assert "output_bytes" not in item and "item()" in item["meta_error"] and item["input_bytes"] == 64
    s = summarize([big, item])
    assert s["device_compare_tasks"] == 1 and s["meta_errors"] == 1 and s["output_ge_1gib"] == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_placement_probe_times_copies_of_one_set_eager_and_replayed(tmp_path):
    """bench/placement_probe.py on a small task: every copy timed every round, ratios to the first copy near 1."""
    from bench.placement_probe import probe

    task = tmp_path / "scale.py"
    task.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
                    "def get_inputs():\n    return [torch.rand(4096, 4096)]\n\ndef get_init_inputs():\n    return []\n")
    for graph, shuffled in ((False, False), (True, False), (True, True)):
        r = probe(str(task), buffers=3, rounds=6, graph=graph, seed=1, shuffle_capture=shuffled)
        print("placement probe:", r)
        assert r["capture_rank"] == (None if not graph else r["capture_rank"] if shuffled else [0, 1, 2]), r
        assert not graph or sorted(r["capture_rank"]) == [0, 1, 2], r
        assert r["copies"] == 3 and len(r["median_ms"]) == 3 and r["in_gib"] == 0.06 and "warning" not in r, r
        assert len(set(r["addresses_mib"])) == 3 and r["paired_to_first"][0] == [1.0, 1.0, 1.0], r
        assert all(0.5 < m < 2 and lo <= m <= hi for m, lo, hi in r["paired_to_first"]), r
        assert len(r["even_over_odd"]) == 3 and all(0.5 < x < 2 for x in r["even_over_odd"]), r
    with pytest.raises(ValueError, match="at least 2"):
        probe(str(task), buffers=2, rounds=1, graph=False, seed=1)


def test_placement_probe_says_it_needs_a_gpu(monkeypatch, capsys):
    import bench.placement_probe as P

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("sys.argv", ["placement_probe.py", "task.py"])
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        P.main()


def test_compare_profile_times_the_comparison_and_each_chunk_operation_on_a_cpu(tmp_path):
    """bench/compare_profile.py (the next device call's profile of the large-output comparison) runs its in-process
    parts on a CPU: the honest pair compares equal (verdict None) and every chunk operation has a time."""
    from bench.compare_profile import main

    out = tmp_path / "cp.json"
    assert main(["--device", "cpu", "--sizes-mib", "1", "--reps", "1", "--json", str(out)]) == 0
    lines = json.loads(out.read_text())
    inproc = next(x for x in lines if x.get("case") == "inproc")
    assert inproc["verdict"] is None and inproc["s"] > 0  # r and r*(1+1e-7 noise) are within float32's tolerance
    ops = next(x for x in lines if x.get("case") == "ops")
    assert ops["chunk_elems"] == 1024**2 // 4 and all(ops[k] >= 0 for k in ("isfinite", "sub+abs", "bad.sum"))


def test_compare_profiles_fused_comparison_gives_compares_verdicts_and_leaves_the_outputs_alone():
    """The profile's one-pass comparison (measured beside compare.compare, a candidate to replace its device path)
    answers every case as compare.compare does, messages included, and never writes the outputs it reads."""
    from bench.compare_profile import fused_compare
    from kernelrl.evaluation.compare import compare

    g = torch.Generator().manual_seed(0)
    r = torch.rand(3000, generator=g) * 4 - 2
    cases = {"honest": r * (1 + 1e-7 * torch.randn(3000, generator=g))}
    one_bad = r.clone()
    one_bad[1234] += 0.5
    cases["one element off"] = one_bad
    cases["all slightly off (elementwise passes, norm fails)"] = r + 9e-5 * r.abs().clamp_min(1.0) * r.sign()
    cases["edge of the tolerance"] = r + (r.abs() * 1e-3 + 0.7e-4)
    near = r.clone()
    near[5] += r[5].abs() * 1e-3 + 0.9e-4  # one element just inside its bound (atol x scale, scale ~1.15 here)
    cases["one element near its bound"] = near
    past = r.clone()
    past[5] += r[5].abs() * 1e-3 + 3e-4  # just past it: the norm alone (~3e-5 relative) would pass this one
    cases["one element past its bound"] = past
    nan_c = r.clone()
    nan_c[7] = float("nan")
    cases["NaN where the reference is finite"] = nan_c
    cases["zeros"] = torch.zeros_like(r)
    r_nan = r.clone()
    r_nan[7] = float("nan")
    inf_r = r.clone()
    inf_r[9] = float("inf")
    pairs = [([r], [c], [1], [1]) for c in cases.values()]
    pairs += [([r_nan], [r_nan.clone()], [1], [1]), ([inf_r], [inf_r.clone()], [1], [1]), ([inf_r], [r], [1], [1])]
    pairs += [([r.half()], [(r * (1 + 1e-4)).half()], [1], [1]), ([r.half()], [(r + 0.1).half()], [1], [1])]
    pairs += [([r], [r[:10]], [1], [1]), ([r], [r, r], [1], [2]), ([r.new_zeros(0)], [r.new_zeros(0)], [1], [1])]
    pairs += [([torch.arange(10)], [torch.arange(10)], [1], [1]), ([torch.arange(10)], [-torch.arange(10)], [1], [1])]
    verdicts = []
    for ref, cand, rs, cs in pairs:
        before = [t.clone() for t in ref + cand]
        want, got = compare(ref, cand, rs, cs), fused_compare(ref, cand, rs, cs)
        assert got == want, (want, got)
        assert all(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
                   for a, b in zip(before, ref + cand))
        verdicts.append(want)
    # the cases are not all passes: honest, NaN/inf matched, small half error, empty and equal integers pass
    assert [v is None for v in verdicts] == [True, False, False, False, True, False, False, False, True, True, False,
                                               True, False, False, False, True, True, False]
