"""The Prefect flows on the fake steps: end to end, skip on unchanged inputs, --from, retries, resume, artifacts,
logs, the CLI. One Prefect test harness (a temporary server, ~20 s) for the whole module."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.prefect_server import prefect_test_server

FAKE = "tests.fake_steps"
ALL = ["augment", "sft", "selfsup", "crl", "bench"]


@pytest.fixture(scope="module")
def harness():
    with prefect_test_server("kernelrl-prefect-"):
        yield


@pytest.fixture
def home(harness, isolated_home):
    return isolated_home


def control(home: Path, stage: str, **kw) -> None:
    d = home / "fake"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stage}.json").write_text(json.dumps(kw))


def calls(home: Path) -> list[str]:
    p = home / "fake" / "calls.log"
    return p.read_text().split() if p.exists() else []


def run_pipeline(**kw):
    from flows.pipeline import pipeline

    kw.setdefault("run", "r1")
    kw.setdefault("recipe", "smoke")
    kw.setdefault("retry_delay_s", 0)
    return pipeline(module_prefix=FAKE, **kw)


def latest_artifacts(prefix: str) -> dict:
    """The newest artifact per key for keys starting with ``prefix``. Filtered on the server: an unfiltered
    read returns only the server's default page (200) of every artifact the module's runs made, in no
    guaranteed order, so keys went missing once enough runs had published."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    out: dict = {}
    with get_client(sync_client=True) as client:
        offset = 0
        while True:
            page = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"{prefix}%")),
                                         sort=ArtifactSort.CREATED_DESC, limit=200, offset=offset)
            for a in page:
                if a.key:
                    out.setdefault(a.key, a)
            if len(page) < 200:
                return out
            offset += 200


def records(home: Path, run: str = "r1") -> dict:
    from kernelrl.store import Store

    store = Store(f"sqlite:///{home / 'store.db'}")
    try:
        return {s: store.stage_record(run, s) for s in ALL}
    finally:
        store.engine.dispose()


def test_end_to_end_then_skip_then_from_then_changed_inputs(home):
    out = run_pipeline()
    assert out["stages"] == dict.fromkeys(ALL, "done")
    assert calls(home) == ALL
    assert out["report"] and Path(out["report"]).read_text().startswith("# fake report")
    recs = records(home)
    assert all(r["status"] == "done" and r["cache_key"] for r in recs.values())
    assert Path(recs["crl"]["manifest"]["outputs"]["checkpoint"]).is_dir()

    # Artifacts for the UI: per-stage markdown + metrics table (speedup quantiles), links, progress, summary.
    arts = latest_artifacts("r1-")
    assert {"r1-augment", "r1-bench", "r1-bench-metrics", "r1-crl-checkpoint", "r1-bench-report", "r1-pipeline",
            "r1-crl-progress"} <= set(arts)
    table = json.loads(arts["r1-augment-metrics"].data)
    assert {"metric": "speedups.p50", "value": 1.1} in table and {"metric": "success_rate", "value": 0.5} in table
    assert arts["r1-crl-progress"].data == 100.0
    assert "| bench | done |" in arts["r1-pipeline"].data

    # Same inputs: every stage skips, no step process starts.
    again = run_pipeline()
    assert again["stages"] == dict.fromkeys(ALL, "skipped")
    assert calls(home) == ALL
    assert again["report"] == out["report"]

    # --from selfsup: selfsup and later re-run; augment and sft skip.
    fr = run_pipeline(from_stage="selfsup")
    assert fr["stages"] == {"augment": "skipped", "sft": "skipped", "selfsup": "done", "crl": "done",
                            "bench": "done"}
    assert calls(home) == ALL + ["selfsup", "crl", "bench"]

    # A bench-only recipe change re-runs bench only; a deleted crl checkpoint re-runs crl (and so bench).
    n = len(calls(home))
    run_pipeline(overrides={"bench.budget_s": "2.0"})
    assert calls(home)[n:] == ["bench"]
    shutil.rmtree(records(home)["crl"]["manifest"]["outputs"]["checkpoint"])
    n = len(calls(home))
    run_pipeline(overrides={"bench.budget_s": "2.0"})
    assert calls(home)[n:] == ["crl", "bench"]

    # --only with --force: just that stage.
    n = len(calls(home))
    assert run_pipeline(only="sft", force=True)["stages"] == {"sft": "done"}
    assert calls(home)[n:] == ["sft"]


def test_failed_stage_is_retried_and_earlier_stages_are_not_rerun(home):
    # selfsup crashes once: its task retries (Prefect task retry) within the same flow run.
    control(home, "selfsup", fail_times=1)
    out = run_pipeline(retries=1)
    assert out["stages"] == dict.fromkeys(ALL, "done")
    assert calls(home) == ["augment", "sft", "selfsup", "selfsup", "crl", "bench"]
    assert records(home)["selfsup"]["attempts"] == 2


def test_failure_stops_the_pipeline_and_the_next_run_resumes_there(home):
    from flows.runner import StepFailed

    control(home, "crl", fail_times=2)
    with pytest.raises(StepFailed, match="crash on attempt 2"):
        run_pipeline(retries=1)
    assert calls(home) == ["augment", "sft", "selfsup", "crl", "crl"]
    recs = records(home)
    assert recs["crl"]["status"] == "failed" and recs["bench"] is None
    # Rerun (what `kernelrl pipeline run` again or `prefect flow-run retry` does): finished stages skip.
    out = run_pipeline(retries=0)
    assert out["stages"] == {"augment": "skipped", "sft": "skipped", "selfsup": "skipped", "crl": "done",
                             "bench": "done"}
    assert calls(home)[5:] == ["crl", "bench"]


def test_killed_stage_is_retried(home):
    # sft hangs on its first attempt and is killed (timeout): the task retries it; augment is not re-run.
    control(home, "sft", hang_times=1)
    out = run_pipeline(retries=1, stages=["augment", "sft"], runner_options={"timeout_s": 4, "kill_grace_s": 1})
    assert out["stages"] == {"augment": "done", "sft": "done"}
    assert calls(home) == ["augment", "sft", "sft"]


def test_user_error_is_not_retried(home):
    from flows.runner import StepFailed

    control(home, "augment", user_error=True)
    with pytest.raises(StepFailed, match="user error"):
        run_pipeline(retries=3)
    assert calls(home) == ["augment"]


def test_step_logs_reach_prefect(home):
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from flows.pipeline import pipeline

    state = pipeline(run="logs", module_prefix=FAKE, stages=["augment"], return_state=True)
    assert state.is_completed()
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # logs go to the API in background batches
    flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
    text = ""
    for _ in range(20):
        with get_client(sync_client=True) as client:
            text = "\n".join(log.message for log in client.read_logs(flt))
        if "manifest received" in text:
            break
        time.sleep(0.5)
    assert "fake augment: attempt 1" in text and "fake augment: a line on stderr" in text
    assert "progress 100%" in text


def test_stage_flow_and_cli(home):
    from typer.testing import CliRunner

    from flows.stages import bench_flow, sft_flow
    from kernelrl.cli import app

    cli = CliRunner()
    res = cli.invoke(app, ["pipeline", "run", "--run", "c1", "--steps-module", FAKE, "--retry-delay", "0"])
    assert res.exit_code == 0, res.output
    assert f"report: {home.resolve()}/reports/c1/report.md" in res.output.replace(str(home), str(home.resolve()))
    res = cli.invoke(app, ["pipeline", "status", "--run", "c1", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["bench"]["status"] == "done"
    # one stage as its own flow (what a per-stage deployment runs)
    assert sft_flow(run="c1", module_prefix=FAKE)["status"] == "skipped"
    assert bench_flow(run="c1", module_prefix=FAKE, force=True)["status"] == "done"
    assert calls(home).count("bench") == 2
    # bad input: one line, exit 2, before any flow starts
    for args in (["run", "--run", "c1", "--from", "nope"], ["status", "--run", "missing"],
                 ["run", "--run", "c1", "--set", "sft.epochs=three"]):
        r = subprocess.run([sys.executable, "-m", "kernelrl.cli", "pipeline", *args], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    # pipeline status: outputs as whole lines (a path cut by a table cannot be copied)
    res = cli.invoke(app, ["pipeline", "status", "--run", "c1"])
    ckpt = json.loads(cli.invoke(app, ["pipeline", "status", "--run", "c1", "--json"]).output)["sft"]["manifest"]
    assert res.exit_code == 0 and f"sft checkpoint: {ckpt['outputs']['checkpoint']}\n" in res.output, res.output
    # a stage with bad input: exit 2, one line with the stage, the reason and the next command (issue 33)
    control(home, "crl", user_error=True)
    res = cli.invoke(app, ["pipeline", "run", "--run", "c2", "--steps-module", FAKE, "--retry-delay", "0"])
    assert res.exit_code == 2, res.output
    assert re.search(r"^error: pipeline c2: stage crl: bad input: .* \(log: .*/runs/c2/logs/crl\.log\); next: "
                     rf"correct it and run kernelrl pipeline run --recipe smoke --run c2 --steps-module {FAKE}$",
                     res.output, re.M), res.output
    # a stage that keeps crashing: exit 1, and the next command resumes; the flow's traceback is in the stage log
    control(home, "crl", fail_times=5)
    res = cli.invoke(app, ["pipeline", "run", "--run", "c2", "--steps-module", FAKE, "--retry-delay", "0",
                           "--retries", "0"])
    assert res.exit_code == 1, res.output
    assert re.search(r"^error: pipeline c2: stage crl failed: exit 1: .*; next: kernelrl pipeline run --recipe smoke "
                     rf"--run c2 --steps-module {FAKE} \(finished stages skip\)$", res.output, re.M), res.output
    assert "Traceback" in (home / "runs" / "c2" / "logs" / "crl.log").read_text()  # (stderr: the subprocess tests)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow  # 57 s (the real CLI running a whole pipeline in a subprocess); CI runs the slow suite too
def test_pipeline_console_is_a_few_lines_per_stage(home):
    """What `make pipeline` shows (the real CLI in a subprocess): per stage started / progress / warnings /
    done, then a summary table, the report, where the logs are. The steps' chatter (trl's metric dicts,
    stderr lines) is in the stage log files and not on the console; --verbose shows it."""
    control(home, "sft", noise=40, warn="sft: 3 examples are longer than max_length and were dropped")
    r = _cli("pipeline", "run", "--run", "con", "--steps-module", FAKE, "--retry-delay", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for stage in ALL:
        assert re.search(rf"^\d\d:\d\d:\d\d {stage} +started \(log: .*/runs/con/logs/{stage}\.log\)$", out, re.M), out
        assert re.search(rf"^\d\d:\d\d:\d\d {stage} +100% step 4/4$", out, re.M), out
        assert re.search(rf"^\d\d:\d\d:\d\d {stage} +done in [\d.]+ s", out, re.M), out
    assert re.search(r"^\d\d:\d\d:\d\d bench +done in [\d.]+ s: policy_success_rate=0.5 policy_mean_speedup=1.1 "
                     r"run_best_mean_speedup=1.3 teachers_best_mean_speedup=1.6 tasks=4$", out, re.M), out
    assert re.search(r"sft +! .* WARNING sft: 3 examples are longer than max_length", out), out
    assert "{'loss'" not in out + r.stderr and "a line on stderr" not in out + r.stderr
    assert "Finished in state" not in out + r.stderr  # Prefect's own INFO lines stay off the console
    table = out[re.search(r"^ *pipeline con *$", out, re.M).start():]
    assert re.search(r"stage +status +wall s +numbers", table)
    assert re.search(r"augment +done +[\d.]+ +success_rate=0.5", table), table
    assert f"report: {home.resolve()}/reports/con/report.md" in out.replace(str(home), str(home.resolve()))
    assert "logs: " in out
    assert len(out.splitlines()) < 60, out
    log = (home / "runs" / "con" / "logs" / "sft.log").read_text()
    assert log.count("{'loss'") == 40 and "! fake sft: a line on stderr" in log and "WARNING sft: 3 examples" in log

    # a rerun skips every stage, one line each; --verbose shows every step line again
    r = _cli("pipeline", "run", "--run", "con", "--steps-module", FAKE, "--only", "sft", "--force", "--verbose")
    assert r.returncode == 0 and (r.stdout + r.stderr).count("{'loss'") == 40, r.stdout + r.stderr
    r = _cli("pipeline", "run", "--run", "con", "--steps-module", FAKE, "--from", "bench")
    assert r.returncode == 0 and re.search(r"^\d\d:\d\d:\d\d augment +skipped", r.stdout, re.M), r.stdout
    assert re.search(r"augment +skipped \(earlier run\)", r.stdout)

    # a failing stage: one line saying so and where its whole log is; exit 2 (bad input) with what to run next
    control(home, "crl", user_error=True)
    r = _cli("pipeline", "run", "--run", "con2", "--steps-module", FAKE, "--retry-delay", "0")
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.search(r"crl +failed: .*bad input.*\(full log: .*/runs/con2/logs/crl\.log\)", r.stdout), r.stdout
    assert len(r.stderr.splitlines()) == 1 and "next: correct it and run kernelrl pipeline run" in r.stderr


def test_secrets_from_prefect_blocks(home):
    from prefect.blocks.system import Secret

    from flows.secrets import apply_prefect_secrets

    Secret(value="sk-from-block").save("kernelrl-llm-api-key", overwrite=True)
    env = {"KERNELRL_PREFECT_SECRETS": "1", "KERNELRL_STORE_URL": "sqlite:///kept"}
    assert apply_prefect_secrets(env) == ["KERNELRL_LLM_API_KEY"]  # other blocks do not exist: left unset
    assert env["KERNELRL_LLM_API_KEY"] == "sk-from-block" and env["KERNELRL_STORE_URL"] == "sqlite:///kept"
    assert apply_prefect_secrets({"KERNELRL_LLM_API_KEY": ""}) == []  # off unless the deployment asks


ROOT = Path(__file__).resolve().parents[1]


def test_real_bench_step_on_fake_upstream(home):
    """The real steps.bench through the local runner, on top of fake upstream stages (an empty run: zeros)."""
    from flows.pipeline import pipeline

    run_pipeline(run="rb", stages=["augment", "sft", "selfsup", "crl"], overrides={"task_limit": "2"})
    out = pipeline(run="rb", only="bench", overrides={"task_limit": "2"}, retries=0)
    assert out["stages"] == {"bench": "done"}
    assert Path(out["report"]).exists() and out["report"].endswith(".md")
    keys = set(latest_artifacts("rb-"))
    assert {"rb-bench", "rb-bench-metrics", "rb-report"} <= keys


# Reduced sizes for the real smoke pipeline: every stage, a couple of tasks, a few steps.
REDUCED = {"task_limit": "2", "augment.max_trials": "2", "sft.epochs": "2", "selfsup.iterations": "1",
           "selfsup.samples_per_task": "1", "crl.steps": "2", "crl.group_size": "2", "crl.prompts_per_step": "1",
           "eval.budget_s": "0.2", "bench.budget_s": "0.2", "bench.correctness_trials": "2"}


@pytest.mark.slow
def test_real_steps_end_to_end(home):
    """The real steps (not the fakes) through the local runner: all five stages, then all skipped."""
    from flows.pipeline import pipeline

    out = pipeline(run="real", recipe="smoke", overrides=REDUCED, retries=0)
    assert out["stages"] == dict.fromkeys(ALL, "done")
    assert out["report"] and Path(out["report"]).exists()
    again = pipeline(run="real", recipe="smoke", overrides=REDUCED, retries=0)
    assert again["stages"] == dict.fromkeys(ALL, "skipped")


# -- reports as Prefect artifacts ------------------------------------------------------------------------------
def test_report_becomes_prefect_artifacts(harness, tmp_path):
    """A report published from inside a real Prefect flow run becomes artifacts (Markdown + tables) on the server
    (here, not in a module of its own: its own test server cost ~20 s of make test)."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from kernelrl.reports import artifacts
    from kernelrl.reports.report import Report, SourceResult, make_row

    ok = {"executable": True, "correct": True, "speedup": 2.0, "custom_kernel_built": True}
    rows = [make_row(source="seeds", task_key="builtin/L1/02_Softmax", task="02_Softmax", level=1, result=ok,
                     code="import triton\n"),
            make_row(source="seeds", task_key="builtin/L2/08_X", task="08_X", level=2, result=None, code=None,
                     error="no candidate")]
    report = Report("Artifact Test Report", [SourceResult("seeds", "seeds", rows)], levels=[1, 2])
    paths = report.write(tmp_path / "r", plots=False)

    @flow
    def publish_flow() -> list[str]:
        return artifacts.publish_report_dir(tmp_path / "r")

    keys = publish_flow()
    assert keys == ["artifact-test-report", "artifact-test-report-summary", "artifact-test-report-tasks"]

    async def read():
        async with get_client() as c:
            arts = await c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
            return {a.key: a for a in arts}

    got = asyncio.run(read())
    assert got["artifact-test-report"].type == "markdown"
    assert "## Overall" in got["artifact-test-report"].data and paths["markdown"].read_text() == got[
        "artifact-test-report"].data
    assert got["artifact-test-report-summary"].type == "table" and got["artifact-test-report-tasks"].type == "table"
    assert "02_Softmax" in str(got["artifact-test-report-tasks"].data)
    # outside a flow: nothing is published
    assert artifacts.publish(report) == []
