"""Secrets never leak (issue 9, reliability): planted credentials must not appear in logs, manifests, Prefect
artifacts, the store, checkpoint objects, CLI output, or anywhere a candidate kernel can look.

Planted (each carries a random token of this test run, so nothing else on the machine can match):
- a Postgres store URL with a password (trust auth on 127.0.0.1 ignores it, so the store really works);
- S3 access and secret keys for moto's real S3 server (moto accepts any key; the checkpoints really go there);
- an LLM API key, used by the augment step's HTTP teacher (the `chat_server` fixture: a real OpenAI-compatible
  server on loopback); the test asserts the key reached the server's ``Authorization`` header;
- an orchestrator cloud credential (``AWS_SECRET_ACCESS_KEY``) that no step needs.

Then the real pipeline flow runs through the local step runner: the real ``steps.augment`` (one trial of the HTTP
teacher, whose canned answer is a *probe candidate*), fake sft/selfsup/crl steps (they write checkpoints to S3),
and the real ``steps.bench`` (re-scores the probe). The probe runs inside the evaluator's sandboxed candidate
process while all secrets are in the launching step's environment: it reads its own ``os.environ``,
``/proc/self/environ``, its parent's ``/proc/<ppid>/environ`` and every ``/proc/*/environ`` and ``cmdline`` it can
open, writes what it found to a world-writable folder, and returns a wrong answer if it saw the run's token.

Collected and grepped for every secret (raw, URL-encoded and JSON-escaped): every Prefect log line of the flow
runs (read back by flow-run id), every Prefect artifact of the runs, the raw Prefect database and PREFECT_HOME,
every file under KERNELRL_HOME (manifests, reports, work dirs), every row of every store table, every object in
the S3 bucket (keys and bodies), the HTTP teacher's request bodies, captured stdout/stderr and Python logging.
Finally the ``kernelrl`` CLI commands that show the store or checkpoint store, with reachable and unreachable
URLs, and the command lines ``kernelrl workers up`` gives its workers.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from tests.prefect_server import prefect_test_server

from tests.conftest import create_pg_database, drop_pg_database
from tests.test_llm_fixtures import chat_server, tiny_backend, tiny_model_path  # noqa: F401

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
FAKE = "tests.fake_steps"
RUN = "secrets"
TOKEN = uuid.uuid4().hex[:12]
SECRETS = {
    "store password": f"PLANTED-PG-PASSWORD-{TOKEN}!x",
    "S3 access key": f"PLANTEDS3ACCESSKEY{TOKEN.upper()}",
    "S3 secret key": f"PLANTED/S3+SECRET={TOKEN}",
    "LLM API key": f"sk-PLANTED-LLM-KEY-{TOKEN}",
    "orchestrator AWS secret": f"PLANTED-AWS-SECRET-{TOKEN}",
}


def needles() -> dict[str, str]:
    """Every form a secret could be written in: raw, URL-encoded (both styles), JSON-escaped."""
    out = {}
    for what, value in SECRETS.items():
        for form in (value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]):
            out[form] = what
    return out


def leaks(text: str | bytes, where: str) -> list[str]:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return [f"{what} in {where}" for form, what in needles().items() if form in text]


# -- the probe candidate -------------------------------------------------------------------------------------
PROBE = r'''
import json as _json
import os as _os

_TOKEN = "@TOKEN@"
_OUT = "@OUT@"


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        return e


def _probe():
    me = str(_os.getpid())
    found = {"pid": _os.getpid(), "uid": _os.getuid(), "ppid": _os.getppid(), "env": dict(_os.environ),
             "hits": [], "other_environ_readable": []}
    for k, v in _os.environ.items():
        if _TOKEN in k or _TOKEN in v:
            found["hits"].append("os.environ " + k)
    own = _read("/proc/self/environ")
    found["self_environ"] = own.decode("utf-8", "replace") if isinstance(own, bytes) else repr(own)
    parent = _read("/proc/%d/environ" % _os.getppid())
    found["parent_environ"] = "read" if isinstance(parent, bytes) else type(parent).__name__
    for name in _os.listdir("/proc"):
        if not name.isdigit():
            continue
        for what in ("environ", "cmdline"):
            data = _read("/proc/%s/%s" % (name, what))
            if not isinstance(data, bytes):
                continue
            if what == "environ" and name != me and data:
                found["other_environ_readable"].append(int(name))
            if _TOKEN.encode() in data:
                found["hits"].append("/proc/%s/%s" % (name, what))
    with open(_os.path.join(_OUT, "probe-%d.json" % _os.getpid()), "w") as f:
        _json.dump(found, f)
    return found["hits"]


_HITS = _probe()


class ModelNew(Model):
    """The reference itself, wrong (+1) when the probe saw a planted secret."""

    def forward(self, *args):
        out = super().forward(*args)
        return out + 1.0 if _HITS else out
'''


def probe_candidate(task, out_dir: Path) -> str:
    return task.source + "\n" + PROBE.replace("@TOKEN@", TOKEN).replace("@OUT@", str(out_dir))


# -- Prefect ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def harness():
    """A Prefect test server for the module; yields (PREFECT_HOME, path of the server's SQLite database)."""
    with prefect_test_server("kernelrl-prefect-secrets-") as home:
        from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

        yield home, Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split("///", 1)[1])


def prefect_logs(flow_run_ids) -> list[str]:
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # logs reach the API in background batches
    flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=list(flow_run_ids)))
    lines: list[str] = []
    for _ in range(20):
        lines = []
        with get_client(sync_client=True) as client:
            offset = 0
            while True:
                page = client.read_logs(flt, limit=200, offset=offset)
                lines += [f"{log.name} {log.message}" for log in page]
                if len(page) < 200:
                    break
                offset += 200
        if any("bench | manifest received" in line for line in lines):
            break
        time.sleep(0.5)
    return lines


def prefect_artifacts(flow_run_ids, key_prefix: str) -> list:
    """Every artifact of these flow runs, and every artifact whose key starts with the prefix (paged: an
    unfiltered read returns one page only)."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    arts = {}
    with get_client(sync_client=True) as client:
        for flt in (ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=list(flow_run_ids))),
                    ArtifactFilter(key=ArtifactFilterKey(like_=f"{key_prefix}%"))):
            offset = 0
            while True:
                page = client.read_artifacts(artifact_filter=flt, limit=200, offset=offset)
                arts.update({a.id: a for a in page})
                if len(page) < 200:
                    break
                offset += 200
        runs = [client.read_flow_run(i) for i in flow_run_ids]
    return list(arts.values()), runs


# -- other places --------------------------------------------------------------------------------------------
def files_under(root: Path, skip: set[Path] = frozenset()):
    for p in sorted(root.rglob("*")):
        if p.is_file() and p not in skip:
            yield p


def store_dump(db_url: str) -> list[tuple[str, str]]:
    """Every row of every table of the store, as text."""
    from sqlalchemy import create_engine, text

    eng = create_engine(db_url)
    rows = []
    try:
        with eng.connect() as c:
            tables = [r[0] for r in c.execute(text(
                "select table_name from information_schema.tables where table_schema = 'public'"))]
            for t in tables:
                rows += [(t, r[0]) for r in c.execute(text(f'select t::text from "{t}" t'))]
    finally:
        eng.dispose()
    return rows


def s3_objects(endpoint: str, bucket: str) -> list[tuple[str, bytes]]:
    from tests.fixtures_s3 import s3_client

    client = s3_client(endpoint)
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read() if obj["Size"] < 1 << 20 else b""
            out.append((obj["Key"], body))
    return out


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)


# -- the test ------------------------------------------------------------------------------------------------
@pytest.fixture
def planted(harness, isolated_home, pg_server, s3_bucket, monkeypatch):
    """The planted secrets in the environment (after the Prefect server started: it is the orchestrator's)."""
    from kernelrl.config.settings import get_settings

    db = create_pg_database("kernelrl_secrets")
    url = db.replace("://postgres@", f"://postgres:{quote_plus(SECRETS['store password'])}@", 1)
    assert url != db
    endpoint, bucket = s3_bucket
    env = {
        "KERNELRL_STORE_URL": url,
        "KERNELRL_CHECKPOINT_URI": f"s3://{bucket}/ck",
        "KERNELRL_S3_ENDPOINT_URL": endpoint,
        "KERNELRL_S3_ACCESS_KEY_ID": SECRETS["S3 access key"],
        "KERNELRL_S3_SECRET_ACCESS_KEY": SECRETS["S3 secret key"],
        "KERNELRL_LLM_API_KEY": SECRETS["LLM API key"],
        "AWS_SECRET_ACCESS_KEY": SECRETS["orchestrator AWS secret"],
        "KERNELRL_EVAL_LOCAL_WORKERS": "1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    get_settings.cache_clear()
    yield {"url": url, "db": db, "endpoint": endpoint, "bucket": bucket, "home": isolated_home,
           "prefect_home": harness[0], "prefect_db": harness[1]}
    get_settings.cache_clear()
    drop_pg_database(db)


@pytest.fixture
def log_records():
    """Every log record this process creates at an enabled level, whatever handlers are installed (Prefect
    reconfigures logging when a flow starts, which drops pytest's caplog handler from the root logger)."""
    records: list[logging.LogRecord] = []
    old = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        rec = old(*args, **kwargs)
        records.append(rec)
        return rec

    logging.setLogRecordFactory(factory)
    try:
        yield records
    finally:
        logging.setLogRecordFactory(old)


def test_planted_secrets_never_leak(planted, chat_server, log_records, caplog, capfd):  # noqa: F811
    from flows.pipeline import pipeline
    from kernelrl.config.recipes import load_recipe
    from kernelrl.training.common import recipe_tasks

    caplog.set_level(logging.INFO)
    records = log_records
    home: Path = planted["home"]
    teacher = f"{chat_server.base_url}#tiny"
    overrides = {"task_limit": "1", "augment.teachers": [teacher], "augment.max_trials": "1",
                 "augment.target_successes": "1", "augment.max_new_tokens": "32", "eval.budget_s": "0.2",
                 "eval.correctness_trials": "2", "bench.budget_s": "0.2", "bench.correctness_trials": "2",
                 "bench.plots": "false"}
    task = recipe_tasks(load_recipe("smoke", {"task_limit": 1}))[0]
    probe_dir = Path(tempfile.mkdtemp(prefix="kernelrl-secrets-probe-"))
    os.chmod(probe_dir, 0o777)  # the candidate runs as a fresh unprivileged uid
    for _ in range(3):  # one trial needs one answer; spares in case the client retries
        chat_server.faults.append("canned:## Algorithm Design\nThe reference.\n\n```python\n"
                                  + probe_candidate(task, probe_dir) + "\n```\n")
    (home / "fake").mkdir(parents=True, exist_ok=True)
    (home / "fake" / "sft.json").write_text(json.dumps({"dump_env": True}))  # what a fake step's env holds

    t0 = time.monotonic()
    try:
        common = dict(run=RUN, recipe="smoke", overrides=overrides, retries=0, return_state=True)
        states = [pipeline(stages=["augment"], **common),  # real augment: the HTTP teacher answers the probe
                  pipeline(stages=["augment", "sft", "selfsup", "crl"], module_prefix=FAKE, **common),
                  pipeline(only="bench", **common)]  # real bench: re-scores the probe
        for st in states:
            assert st.is_completed(), st.result(raise_on_failure=False)
        outs = [st.result() for st in states]
        assert outs[0]["stages"] == {"augment": "done"}
        assert outs[1]["stages"] == {"augment": "skipped", "sft": "done", "selfsup": "done", "crl": "done"}
        assert outs[2]["stages"] == {"bench": "done"}
        pipeline_s = time.monotonic() - t0

        # The LLM key really was used: it reached the teacher's server in the Authorization header, nowhere else.
        assert chat_server.requests, "the HTTP teacher was never asked"
        assert all(h.get("Authorization") == f"Bearer {SECRETS['LLM API key']}" for h in chat_server.headers_seen)
        found = []
        for req, headers in zip(chat_server.requests, chat_server.headers_seen):
            found += leaks(json.dumps(req), "an LLM request body")
            found += leaks(json.dumps({k: v for k, v in headers.items() if k != "Authorization"}),
                           "LLM request headers")

        # The candidate: it ran (augment and bench) in the sandbox, saw none of the secrets, and scored correct.
        reports = [json.loads(p.read_text()) for p in sorted(probe_dir.glob("probe-*.json"))]
        assert reports, "the probe candidate never ran"
        for r in reports:
            assert r["hits"] == [], f"candidate pid {r['pid']} (uid {r['uid']}) saw planted secrets: {r['hits']}"
            assert not any(k.startswith(("KERNELRL_", "AWS_")) for k in r["env"]), sorted(r["env"])
            found += leaks(json.dumps(r), f"what candidate pid {r['pid']} could read")
            if os.geteuid() == 0:  # the candidate runs as a fresh uid: no other process's environment is readable
                assert r["uid"] != 0 and r["parent_environ"] != "read" and not r["other_environ_readable"], r
        assert len({r["pid"] for r in reports}) >= 2, f"the probe ran in augment only, not in bench: {reports}"
        from kernelrl.store import Store

        store = Store(planted["db"])
        try:
            with store.engine.connect() as c:
                from sqlalchemy import text

                evals = c.execute(text("select e.correct, e.purpose from evaluations e join candidates c "
                                       "on c.id = e.candidate_id where c.origin_stage = 'augment'")).all()
        finally:
            store.engine.dispose()
        assert {p for _, p in evals} >= {"reward", "final"}, evals
        assert all(correct for correct, _ in evals), f"the probe scored wrong: it saw a secret ({evals})"

        # A step gets only the secrets its stage needs: sft has the store and S3 credentials, not the LLM key.
        env_dump = home / "fake" / "sft.env.json"
        sft_env = json.loads(env_dump.read_text())
        assert "KERNELRL_LLM_API_KEY" not in sft_env and "AWS_SECRET_ACCESS_KEY" not in sft_env
        assert sft_env["KERNELRL_S3_SECRET_ACCESS_KEY"] == SECRETS["S3 secret key"]  # needed: it wrote to S3

        # Prefect: every log line of the three flow runs, every artifact, the flow runs' parameters and states.
        ids = [st.state_details.flow_run_id for st in states]
        logs = prefect_logs(ids)
        assert any("augment | manifest received" in line for line in logs), logs[-20:]
        found += [f"{x} (log line {line[:200]!r})" for line in logs for x in leaks(line, "a Prefect log line")]
        arts, runs = prefect_artifacts(ids, f"{RUN}-")
        keys = {a.key for a in arts}
        assert {f"{RUN}-augment", f"{RUN}-sft-checkpoint", f"{RUN}-bench", f"{RUN}-pipeline", f"{RUN}-report"} <= keys
        for a in arts:
            found += leaks(json.dumps([a.key, a.description, a.data], default=str), f"Prefect artifact {a.key}")
        for r in runs:
            found += leaks(json.dumps([r.parameters, r.state and r.state.message], default=str),
                           f"Prefect flow run {r.name}")
        # ...and the raw Prefect database and PREFECT_HOME (task run states, results, events: whatever is there).
        for p in [*planted["prefect_db"].parent.glob(planted["prefect_db"].name + "*"),
                  *files_under(planted["prefect_home"])]:
            found += leaks(p.read_bytes(), str(p))

        # KERNELRL_HOME: manifests, the report, work dirs (the fake step's env dump above excepted).
        manifests = list(home.rglob("manifests/*.json"))
        assert {p.stem for p in manifests} == {"augment", "sft", "selfsup", "crl", "bench"}
        for p in files_under(home, skip={env_dump}):
            found += leaks(p.read_bytes(), str(p.relative_to(home)))

        # The store: stage records (manifests, inputs, errors), attempts, candidates, evaluations, jobs, runs.
        rows = store_dump(planted["db"])
        assert {t for t, _ in rows} >= {"stages", "attempts", "candidates", "evaluations", "eval_jobs"}
        for table, row in rows:
            found += leaks(row, f"store table {table}")

        # S3: object keys and bodies (checkpoint manifests, the bench report copy).
        objects = s3_objects(planted["endpoint"], planted["bucket"])
        assert any(k.startswith("ck/runs/secrets/sft/") for k, _ in objects), [k for k, _ in objects]
        assert any("bench-report" in k for k, _ in objects)
        for key, body in objects:
            found += leaks(key, f"S3 key {key}") + leaks(body, f"S3 object {key}")

        # The CLI: store and checkpoint commands with the planted settings; an unreachable store and S3.
        env = dict(os.environ)
        up = cli("store", "upgrade", env=env)
        assert up.returncode == 0 and ":***@" in up.stdout, up.stdout + up.stderr
        runs_cli = [up, cli("store", "stats", env=env), cli("checkpoints", "ls", env=env),
                    cli("pipeline", "status", "--run", RUN, env=env)]
        assert all(r.returncode == 0 for r in runs_cli), [r.stderr for r in runs_cli]
        assert "secrets/sft/final" in runs_cli[2].stdout
        dead_url = planted["url"].replace("127.0.0.1:5432", "127.0.0.1:1")
        for args, e in (
            (["store", "stats", "--store-url", dead_url], env),
            (["store", "stats"], dict(env, KERNELRL_STORE_URL=dead_url)),
            (["pipeline", "status", "--run", "missing"], env),
            (["checkpoints", "ls"], dict(env, KERNELRL_S3_ENDPOINT_URL="http://127.0.0.1:1")),
        ):
            r = cli(*args, env=e)
            assert r.returncode != 0, (args, r.stdout)
            runs_cli.append(r)
        assert runs_cli[-4].stderr.startswith("error: store postgresql+psycopg2://postgres:***@"), runs_cli[-4].stderr
        for r in runs_cli:
            found += leaks(r.stdout + r.stderr, f"`kernelrl {' '.join(r.args[3:])}` output")
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)

    # What this process printed and logged (the steps' output arrives through the runner's logger).
    out, err = capfd.readouterr()
    found += leaks(out, "captured stdout") + leaks(err, "captured stderr")
    for rec in [*caplog.records, *records]:
        found += leaks(f"{rec.name} {rec.getMessage()} {rec.exc_text or ''}", f"log record of {rec.name}")
    assert any(r.name.startswith("prefect.task_runs") for r in records), "no logging captured"
    assert not found, "planted secrets leaked:\n" + "\n".join(sorted(set(found)))
    print(f"pipeline {pipeline_s:.1f}s")


def test_workers_up_keeps_the_store_password_off_worker_command_lines(planted, monkeypatch):
    """`kernelrl workers up --store URL` starts one process per device: the URL (password included) must reach
    them through the environment, never argv (any user, a candidate kernel included, can read /proc/*/cmdline)."""
    import kernelrl.cli.worker as worker_cli
    from typer.testing import CliRunner

    from kernelrl.cli import app

    started = []

    class FakeWorker:
        returncode = 0

        def __init__(self, cmd, **kw):
            started.append((cmd, kw))
            self.pid = 4242

        def poll(self):
            return 0

    monkeypatch.delenv("KERNELRL_STORE_URL")  # the --store option is the only place the URL comes from
    monkeypatch.setattr(worker_cli.subprocess, "Popen", FakeWorker)
    res = CliRunner().invoke(app, ["workers", "up", "--gpus", "none", "--cpu", "2", "--store", planted["url"]])
    assert res.exit_code == 0, res.output
    assert len(started) == 2
    for cmd, kw in started:
        assert not leaks(" ".join(cmd), "argv"), cmd
        # the worker still serves the store it was given
        assert (kw.get("env") or {}).get("KERNELRL_STORE_URL") == planted["url"]
    assert not leaks(res.output, "output")
