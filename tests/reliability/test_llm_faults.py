"""LLM endpoints under faults, one level above the backend: the real augmentation step
(``python -m steps.augment``, a subprocess) asks a real OpenAI-compatible HTTP server on 127.0.0.1 (the tiny
local model behind it, tests/test_llm_fixtures.py) that answers with queued faults: 429, 500, a hang longer than
the client timeout, a stream cut short of its Content-Length, truncated JSON, an HTML page, prose without code,
a broken code block. Transient faults are retried (the server sees the retries); what still fails is stored as
an attempt with the reason; the step exits 0 with its manifest; nothing raises. And an endpoint that answers
500 forever still ends the stage cleanly, every trial stored as a failed attempt.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrl.llm.backends.openai_http import OpenAIBackend
from tests.test_llm_fixtures import chat_server, tiny_backend, tiny_model_path  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
MARKER = "KERNELRL_MANIFEST "
TASK = "builtin/L1/01_DiagMatmul"  # task_limit=1 picks the first level-1 task
MSGS = [{"role": "user", "content": "Make softmax fast."}]

PROSE = "I am sorry, I cannot help with kernels today."
BROKEN = "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x:\n        return x\n```"


def _valid_answer() -> str:
    """A correct ModelNew for TASK (its first seed), fenced the way a teacher answers."""
    from kernelrl.tasks import get_task
    from kernelrl.training.augment import seed_answers

    return f"```python\n{seed_answers(get_task(TASK), 'cpu')[0]}```"


def _env(home: Path, store_url: str) -> dict:
    env = dict(os.environ, KERNELRL_HOME=str(home), KERNELRL_STORE_URL=store_url, OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=str(ROOT), KERNELRL_LOG_LEVEL="WARNING", KERNELRL_EVAL_LOCAL_WORKERS="1")
    for var in ("KERNELRL_CHECKPOINT_URI", "KERNELRL_LLM_API_KEY"):
        env.pop(var, None)
    return env


def _augment(server, run: str, home: Path, store_url: str, *sets: str, timeout: float = 300):
    """Run the augmentation step against ``server``; (completed process, manifest file)."""
    teacher = f"{server.base_url}#tiny"
    manifest = home / f"{run}.manifest.json"
    # No reference-slowed verdicts (interference_factor): on the busy 2-core test machine the paired reference
    # of 01_DiagMatmul once ran 2.4x its clean baseline and zeroed the one valid answer (a false alarm that is
    # not what this test is about; the evaluator's own tests cover the flag).
    sets = (f"augment.teachers=[\"{teacher}\"]", "augment.max_new_tokens=16", "augment.retry_backoff_s=0.01",
            "eval.budget_s=0.2", "eval.correctness_trials=2", "eval.interference_factor=1000", *sets)
    cmd = [sys.executable, "-m", "steps.augment", "--recipe", "smoke", "--run", run, "--manifest-out", str(manifest),
           *[a for s in sets for a in ("--set", s)]]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(home, store_url), cwd=ROOT, timeout=timeout)
    return r, manifest


def _rows(store_url: str, run: str) -> tuple[list[dict], dict, dict | None]:
    """(attempts of the run in insertion order, table counts, the augment stage record)."""
    from sqlalchemy import select

    from kernelrl.store import Store
    from kernelrl.store.models import AttemptRow

    st = Store(store_url)
    try:
        with st.session() as s:
            rows = [{"trial": int(a.dedup_key.rsplit(":", 3)[1]), "dedup_key": a.dedup_key, "model": a.model,
                     "response": a.response, "parse_error": a.parse_error, "candidate_id": a.candidate_id,
                     "task_id": a.task_id}
                    for a in s.scalars(select(AttemptRow).where(AttemptRow.run_name == run,
                                                                AttemptRow.stage == "augment")
                                       .order_by(AttemptRow.id)).all()]
        return rows, st.stats(), st.stage_record(run, "augment")
    finally:
        st.engine.dispose()


def _ok_manifest(r, manifest: Path) -> dict:
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"augment failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert "Traceback" not in out, out[-6000:]
    last = [ln for ln in r.stdout.splitlines() if ln.strip()][-1]
    assert last.startswith(MARKER), r.stdout[-2000:]
    m = json.loads(manifest.read_text())
    assert m == json.loads(last[len(MARKER):])
    assert m["stage"] == "augment" and m["status"] == "done"
    return m


def test_cut_stream_fault_is_a_real_truncated_body(chat_server):
    """The fixture's ``truncated`` fault: Content-Length promises more than arrives, then the socket closes
    (http.client sees IncompleteRead); the HTTP client retries it and then gets the model's answer."""
    chat_server.faults.append("truncated")
    conn = http.client.HTTPConnection("127.0.0.1", chat_server.server_address[1], timeout=10)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({"model": "tiny", "messages": MSGS}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    promised = int(resp.getheader("Content-Length"))
    with pytest.raises(http.client.IncompleteRead) as ei:
        resp.read()
    assert 0 < len(ei.value.partial) < promised
    conn.close()

    b = OpenAIBackend(chat_server.base_url, "tiny", timeout_s=5, max_retries=1, backoff_s=0.01)
    try:
        chat_server.faults.append("truncated")
        [[g]] = b.generate([MSGS], n=1, max_tokens=8, seed=0)
        assert g.ok and g.completion_tokens >= 1, g.error
        assert b.usage.retries == 1 and b.usage.failures == 0
        chat_server.faults.extend(["truncated", "truncated"])
        [[g]] = b.generate([MSGS], n=1, max_tokens=8, seed=0)
        assert not g.ok and "RemoteProtocolError" in g.error and "failed after 2 attempts" in g.error
    finally:
        b.close()
    assert len(chat_server.requests) == 1 + 2 + 2


def test_augment_step_survives_every_kind_of_bad_response(chat_server, store_url, tmp_path):
    """Seven trials, each answered badly in its own way; one retry per request (max_retries=1), 2 s timeout."""
    chat_server.hang_s = 6.0  # > request_timeout_s: the client must give up and retry, not wait for the 503
    plan = [  # the requests of each trial, in order (a retry takes the next fault)
        ["429", f"canned:{PROSE}"],          # 0: rate limited, retried; the answer is prose -> parse failure
        ["500", "500"],                      # 1: server error twice -> failed after 2 attempts
        ["truncated", "hang"],               # 2: cut stream, then a hang past the timeout -> failed (timeout)
        ["garbage", "html"],                 # 3: truncated JSON, then an HTML page with 200 -> failed (not JSON)
        [f"canned:{BROKEN}"],                # 4: a code block that is not Python -> parse failure
        ["hang", f"canned:{_valid_answer()}"],  # 5: a hang, retried: a correct kernel -> candidate, evaluated
        ["truncated", None],                 # 6: cut stream, retried: the tiny model's own answer
    ]
    for faults in plan:
        chat_server.faults.extend(f or "none" for f in faults)  # "none" is no fault: the model answers
    run = "faults"
    r, manifest = _augment(chat_server, run, tmp_path / "home", store_url, "task_limit=1",
                           f"augment.max_trials={len(plan)}", f"augment.target_successes={len(plan)}",
                           "augment.request_timeout_s=2", "augment.max_retries=1")
    m = _ok_manifest(r, manifest)

    # every trial ran and reached the server, retries included; each retry re-sent the same request
    assert len(chat_server.requests) == sum(len(f) for f in plan)
    assert not chat_server.faults
    i = 0
    for faults in plan:
        sent = chat_server.requests[i:i + len(faults)]
        assert all(req == sent[0] for req in sent), "a retry must re-send the same request"
        i += len(faults)
    assert len({json.dumps(q, sort_keys=True) for q in chat_server.requests}) == len(plan)  # trials differ (seed)
    retried = sum(1 for f in plan if len(f) > 1)
    assert r.stderr.count("retry 1/1") == retried, r.stderr[-4000:]

    met = m["metrics"]
    assert met["attempts"] == len(plan) and met["successes"] == 1 and met["tasks"] == 1
    assert met["per_task"] == {TASK: {"attempts": len(plan), "successes": 1}}

    rows, stats, stage = _rows(store_url, run)
    assert stage["status"] == "done"
    assert [a["trial"] for a in rows] == list(range(len(plan)))
    assert {a["model"] for a in rows} == {f"{chat_server.base_url}#tiny"}
    by = {a["trial"]: a for a in rows}
    assert by[0]["response"] == PROSE and by[0]["candidate_id"] is None
    assert "no ModelNew code found" in by[0]["parse_error"]
    assert by[1]["response"] == "" and by[1]["candidate_id"] is None
    assert by[1]["parse_error"].startswith("failed after 2 attempts: HTTP 500"), by[1]["parse_error"]
    assert by[2]["parse_error"].startswith("failed after 2 attempts: timeout after 2s"), by[2]["parse_error"]
    assert by[3]["parse_error"].startswith("failed after 2 attempts: response is not valid JSON"), by[3]["parse_error"]
    assert "<html>" in by[3]["parse_error"]
    assert by[4]["response"] == BROKEN and by[4]["candidate_id"] is None
    assert "does not parse as Python" in by[4]["parse_error"]
    assert by[5]["parse_error"] is None and by[5]["candidate_id"] is not None
    assert isinstance(by[6]["response"], str) and (by[6]["parse_error"] or by[6]["candidate_id"])  # recorded
    assert stats["attempts"] == len(plan)
    assert stats["candidates"] == 1 + int(by[6]["candidate_id"] is not None)
    assert stats["evaluations"] >= 1


def test_augment_step_with_an_endpoint_down_for_good(chat_server, store_url, tmp_path):
    """Every request of the whole batch gets a 500: the step still ends with status done and exit 0, each trial
    stored as a failed attempt with the reason, no candidate, no evaluation; every request retried twice."""
    chat_server.default_fault = "500"
    run = "down"
    tasks, trials, tries = 2, 3, 3
    r, manifest = _augment(chat_server, run, tmp_path / "home", store_url, f"task_limit={tasks}",
                           f"augment.max_trials={trials}", "augment.request_timeout_s=5",
                           f"augment.max_retries={tries - 1}")
    m = _ok_manifest(r, manifest)
    assert len(chat_server.requests) == tasks * trials * tries
    assert r.stderr.count("HTTP 500") >= tasks * trials * (tries - 1)  # the retry warnings name the reason
    met = m["metrics"]
    assert met["attempts"] == tasks * trials and met["successes"] == 0 and met["success_rate"] == 0
    assert met["tasks"] == tasks and met["tasks_with_success"] == 0
    assert all(d == {"attempts": trials, "successes": 0} for d in met["per_task"].values())

    rows, stats, stage = _rows(store_url, run)
    assert stage["status"] == "done"
    assert len(rows) == tasks * trials and len({a["task_id"] for a in rows}) == tasks
    for a in rows:
        assert a["candidate_id"] is None and a["response"] == ""
        assert a["parse_error"].startswith(f"failed after {tries} attempts: HTTP 500"), a["parse_error"]
    assert sorted(a["trial"] for a in rows) == sorted(list(range(trials)) * tasks)
    assert stats["attempts"] == tasks * trials and stats["candidates"] == 0 and stats["evaluations"] == 0


def test_a_dead_teacher_is_taken_as_down_after_its_failure_limit(chat_server, store_url, tmp_path):
    """With ``augment.teacher_failure_limit=2`` a teacher whose endpoint fails 2 trials in a row is dropped for
    the rest of the stage: 2 attempts stored (failed, with the reason), the other tasks skipped and the teacher
    named in the manifest's ``teachers_down``; the step still ends done."""
    chat_server.default_fault = "500"
    run = "dead"
    r, manifest = _augment(chat_server, run, tmp_path / "home", store_url, "task_limit=3", "augment.max_trials=3",
                           "augment.request_timeout_s=5", "augment.max_retries=0", "augment.teacher_failure_limit=2")
    m = _ok_manifest(r, manifest)
    met = m["metrics"]
    teacher = f"{chat_server.base_url}#tiny"
    assert list(met["teachers_down"]) == [teacher] and "2 trials in a row" in met["teachers_down"][teacher]
    assert met["attempts"] == 2 and len(met["per_task"]) == 1 and len(chat_server.requests) == 2
    assert "taken as down" in r.stderr
    rows, stats, stage = _rows(store_url, run)
    assert stage["status"] == "done" and len(rows) == 2 and all(a["parse_error"] for a in rows)
