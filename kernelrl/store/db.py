"""The exemplar store facade: engine, sessions, migrations, and the few writes every stage needs.

    store = Store("sqlite:///.kernelrl/store.db")   # or postgresql+psycopg2://user@127.0.0.1:5432/kernelrl
    store.upgrade()                                  # alembic upgrade head
    task_id = store.upsert_task(task)
    cand_id = store.add_candidate(task_id, source, origin_stage="seed")   # idempotent on (task, source hash)
    store.add_evaluation(cand_id, result.to_dict(), settings_dict)

Writes are idempotent where a retry could repeat them (candidates by source hash, attempts by dedup key), so
a step that dies and is re-run never duplicates rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, inspect, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from kernelrl.config.settings import redact_url
from kernelrl.errors import StoreError
from kernelrl.store.models import (
    AttemptRow,
    CandidateRow,
    CandidateRunRow,
    EvalJobRow,
    EvaluationRow,
    RunRow,
    StageRow,
    TaskRow,
    utcnow,
)
from kernelrl.tasks.loader import Task, source_hash

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def settings_hash(settings: dict[str, Any] | None) -> str:
    blob = json.dumps(settings or {}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers run beside the single writer; busy_timeout makes writers queue instead of failing.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # an unwritable KERNELRL_HOME or store path is bad input: one line, exit 2
                raise StoreError(f"store {url}: cannot create {Path(path).parent} ({e.strerror or e})") from None
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # pool_pre_ping: a connection the server dropped is replaced instead of failing the next query.
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


class Store:
    def __init__(self, url: str | None = None):
        from kernelrl.config.settings import get_settings, normalize_store_url

        if url is None:
            url = get_settings().resolved_store_url
        try:  # a URL from a flag gets the rule settings apply (postgresql:// means psycopg2)
            url = normalize_store_url(url)
        except ValueError as e:
            raise StoreError(f"store URL {redact_url(url)}: {e}") from None
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    def __repr__(self) -> str:
        return f"Store({redact_url(self.url)})"

    # -- sessions and migrations ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on any error."""
        s = self._sessions()
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise
        finally:
            s.close()

    def retrying(self, fn, *, attempts: int = 5, delay_s: float = 0.5):
        """Run ``fn(session)`` in a transaction, retrying when the connection drops (the work is idempotent)."""
        for i in range(attempts):
            try:
                with self.session() as s:
                    return fn(s)
            except OperationalError:
                if i == attempts - 1:
                    raise
                self.engine.dispose()
                time.sleep(delay_s * (2**i))

    def alembic_config(self):
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["engine"] = self.engine
        return cfg

    def upgrade(self, revision: str = "head") -> None:
        from alembic import command

        try:
            with self.engine.begin() as conn:
                cfg = self.alembic_config()
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
        except OperationalError as e:
            raise StoreError(f"store {redact_url(self.url)}: "
                             f"cannot connect ({str(e.orig).strip().splitlines()[0]})") from None

    def current_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def ensure_ready(self) -> None:
        """Upgrade when the schema is missing or behind (cheap when it is current)."""
        try:
            self.upgrade()
        except StoreError:
            raise

    def table_names(self) -> list[str]:
        return inspect(self.engine).get_table_names()

    # -- tasks and candidates ---------------------------------------------------------------------------------
    def upsert_task(self, task: Task) -> int:
        def work(s: Session) -> int:
            row = s.scalar(select(TaskRow).where(TaskRow.key == task.key))
            if row is None:
                row = TaskRow(key=task.key, name=task.name, level=task.level, suite=task.suite,
                              source=task.source, source_hash=task.source_hash, audit_flags=[])
                s.add(row)
                try:
                    s.flush()
                except IntegrityError:  # a concurrent writer inserted it first
                    s.rollback()
                    row = s.scalar(select(TaskRow).where(TaskRow.key == task.key))
            elif row.source_hash != task.source_hash:
                row.source, row.source_hash = task.source, task.source_hash
            return row.id

        return self.retrying(work)

    def task_id(self, key: str) -> int | None:
        with self.session() as s:
            return s.scalar(select(TaskRow.id).where(TaskRow.key == key))

    def add_candidate(self, task_id: int, source: str, *, origin_stage: str, origin_model: str | None = None,
                      run_name: str | None = None, prompt: str | None = None, analysis: str | None = None,
                      design: str | None = None, meta: dict[str, Any] | None = None) -> int:
        """Insert a candidate, or return the existing one with the same task and source hash. With ``run_name``
        the (candidate, run, stage) link is recorded either way: a kernel that several runs produce counts for
        each of them (``candidate_runs``), while the row itself keeps its first producer."""
        h = source_hash(source)

        def work(s: Session) -> int:
            existing = s.scalar(select(CandidateRow.id).where(CandidateRow.task_id == task_id,
                                                              CandidateRow.source_hash == h))
            if existing is not None:
                return existing
            row = CandidateRow(task_id=task_id, source=source, source_hash=h, origin_stage=origin_stage,
                               origin_model=origin_model, run_name=run_name, prompt=prompt, analysis=analysis,
                               design=design, meta=meta or {})
            s.add(row)
            try:
                s.flush()
            except IntegrityError:
                s.rollback()
                return s.scalar(select(CandidateRow.id).where(CandidateRow.task_id == task_id,
                                                              CandidateRow.source_hash == h))
            return row.id

        cid = self.retrying(work)
        if run_name:
            self.link_candidate(cid, run_name, origin_stage)
        return cid

    def link_candidate(self, candidate_id: int, run_name: str, stage: str) -> None:
        """Record that ``stage`` of ``run_name`` produced the candidate (idempotent, safe under concurrency)."""

        def work(s: Session) -> None:
            q = select(CandidateRunRow.id).where(CandidateRunRow.candidate_id == candidate_id,
                                                 CandidateRunRow.run_name == run_name, CandidateRunRow.stage == stage)
            if s.scalar(q) is None:
                s.add(CandidateRunRow(candidate_id=candidate_id, run_name=run_name, stage=stage))
                s.flush()

        try:
            self.retrying(work)
        except IntegrityError:  # a concurrent writer recorded the identical link first: it is there
            pass

    def run_candidate_ids(self, run_name: str, stages: list[str] | tuple[str, ...] | None = None) -> set[int]:
        """Candidates that ``run_name`` (its ``stages``, or any) produced, whoever produced them first."""
        with self.session() as s:
            q = select(CandidateRunRow.candidate_id).where(CandidateRunRow.run_name == run_name)
            if stages:
                q = q.where(CandidateRunRow.stage.in_(list(stages)))
            return set(s.scalars(q).all())

    def add_attempt(self, task_id: int, *, stage: str, run_name: str | None = None, model: str | None = None,
                    prompt: str | None = None, response: str | None = None, parse_error: str | None = None,
                    candidate_id: int | None = None, prompt_tokens: int | None = None,
                    completion_tokens: int | None = None, exemplar_ids: list[int] | None = None,
                    snapshot: int | None = None, dedup_key: str | None = None) -> int:
        """Record one generation. With ``dedup_key`` a retried step writes it once. An attempt of a run that
        produced a candidate links the candidate to that run and stage (as ``add_candidate`` does)."""

        def work(s: Session) -> int:
            if dedup_key is not None:
                existing = s.scalar(select(AttemptRow.id).where(AttemptRow.dedup_key == dedup_key))
                if existing is not None:
                    return existing
            row = AttemptRow(task_id=task_id, stage=stage, run_name=run_name, model=model, prompt=prompt,
                             response=response, parse_error=parse_error, candidate_id=candidate_id,
                             prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                             exemplar_ids=exemplar_ids or [], snapshot=snapshot, dedup_key=dedup_key)
            s.add(row)
            s.flush()
            return row.id

        aid = self.retrying(work)
        if run_name and candidate_id is not None:
            self.link_candidate(candidate_id, run_name, stage)
        return aid

    # -- evaluations ------------------------------------------------------------------------------------------
    def add_evaluation(self, candidate_id: int, result: dict[str, Any], settings: dict[str, Any] | None = None,
                       *, purpose: str = "reward") -> int:
        def work(s: Session) -> int:
            row = EvaluationRow(
                candidate_id=candidate_id,
                device_type=str(result.get("device_type") or "unknown"),
                evaluator_version=str(result.get("evaluator_version") or "unknown"),
                settings_hash=settings_hash(settings),
                executable=bool(result.get("executable")),
                correct=bool(result.get("correct")),
                speedup=float(result.get("speedup") or 0.0),
                flags=list(result.get("flags") or []),
                error=result.get("error"),
                timing=dict(result.get("timing") or {}),
                result=result,
                settings=settings or {},
                purpose=purpose,
            )
            s.add(row)
            s.flush()
            return row.id

        return self.retrying(work)

    def cached_evaluation(self, candidate_id: int, evaluator_version: str, device_type: str,
                          purpose: str | None = None) -> dict[str, Any] | None:
        """The newest stored result for this candidate under the same evaluator version and device type."""
        with self.session() as s:
            q = select(EvaluationRow).where(EvaluationRow.candidate_id == candidate_id,
                                            EvaluationRow.evaluator_version == evaluator_version,
                                            EvaluationRow.device_type == device_type)
            if purpose:
                q = q.where(EvaluationRow.purpose == purpose)
            row = s.scalar(q.order_by(EvaluationRow.id.desc()).limit(1))
            return dict(row.result, evaluation_id=row.id) if row else None

    def scored_candidates(self, task_id: int, *, successful_only: bool = True) -> list[dict[str, Any]]:
        """Candidates of a task with their latest score: the exemplar pool for contrastive prompts."""
        with self.session() as s:
            latest = (select(EvaluationRow.candidate_id, func.max(EvaluationRow.id).label("eid"))
                      .join(CandidateRow, CandidateRow.id == EvaluationRow.candidate_id)
                      .where(CandidateRow.task_id == task_id)
                      .group_by(EvaluationRow.candidate_id).subquery())
            q = (select(CandidateRow, EvaluationRow)
                 .join(latest, latest.c.candidate_id == CandidateRow.id)
                 .join(EvaluationRow, EvaluationRow.id == latest.c.eid))
            out = []
            for cand, ev in s.execute(q).all():
                ok = ev.executable and ev.correct and ev.speedup > 0
                if successful_only and not ok:
                    continue
                out.append({"candidate_id": cand.id, "source": cand.source, "speedup": ev.speedup,
                            "origin_stage": cand.origin_stage, "flags": ev.flags, "evaluation_id": ev.id,
                            "success": ok})
            return out

    # -- runs and stages --------------------------------------------------------------------------------------
    def ensure_run(self, name: str, recipe: str, recipe_digest: str = "", config: dict | None = None) -> int:
        def work(s: Session) -> int:
            row = s.scalar(select(RunRow).where(RunRow.name == name))
            if row is None:
                row = RunRow(name=name, recipe=recipe, recipe_digest=recipe_digest, config=config or {})
                s.add(row)
                s.flush()
            return row.id

        return self.retrying(work)

    def stage_record(self, run_name: str, stage: str) -> dict[str, Any] | None:
        with self.session() as s:
            row = s.scalar(select(StageRow).join(RunRow).where(RunRow.name == run_name, StageRow.stage == stage))
            if row is None:
                return None
            return {"status": row.status, "cache_key": row.cache_key, "manifest": row.manifest,
                    "checkpoint_uri": row.checkpoint_uri, "error": row.error, "attempts": row.attempts,
                    "inputs": row.inputs}

    def set_stage(self, run_name: str, stage: str, *, status: str, recipe: str = "", cache_key: str | None = None,
                  inputs: dict | None = None, manifest: dict | None = None, checkpoint_uri: str | None = None,
                  error: str | None = None) -> None:
        run_id = self.ensure_run(run_name, recipe)

        def work(s: Session) -> None:
            row = s.scalar(select(StageRow).where(StageRow.run_id == run_id, StageRow.stage == stage))
            if row is None:
                row = StageRow(run_id=run_id, stage=stage, attempts=0)
                s.add(row)
            row.status = status
            if status == "running":
                row.started_at = utcnow()
                row.attempts = (row.attempts or 0) + 1
            if status in ("done", "failed"):
                row.finished_at = utcnow()
            if cache_key is not None:
                row.cache_key = cache_key
            if inputs is not None:
                row.inputs = inputs
            if manifest is not None:
                row.manifest = manifest
            if checkpoint_uri is not None:
                row.checkpoint_uri = checkpoint_uri
            row.error = error

        self.retrying(work)

    def set_stage_inputs(self, run_name: str, stage: str, inputs: dict) -> None:
        """Replace a registered stage's ``inputs`` (what an attempt decided that a resumed attempt must reuse), its
        status and attempts untouched."""
        def work(s: Session) -> None:
            row = s.scalar(select(StageRow).join(RunRow).where(RunRow.name == run_name, StageRow.stage == stage))
            if row is None:
                raise StoreError(f"run {run_name!r} has no stage {stage} to record inputs for")
            row.inputs = dict(inputs)

        self.retrying(work)

    # -- stats ------------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self.session() as s:
            def count(model, *where):
                return s.scalar(select(func.count()).select_from(model).where(*where)) or 0

            return {
                "tasks": count(TaskRow),
                "candidates": count(CandidateRow),
                "attempts": count(AttemptRow),
                "evaluations": count(EvaluationRow),
                "successful_evaluations": count(EvaluationRow, EvaluationRow.executable, EvaluationRow.correct),
                "runs": count(RunRow),
                "jobs_queued": count(EvalJobRow, EvalJobRow.status == "queued"),
                "jobs_running": count(EvalJobRow, EvalJobRow.status == "running"),
                "jobs_done": count(EvalJobRow, EvalJobRow.status == "done"),
                "revision": self.current_revision(),
            }
