"""Exemplar store schema (SQLAlchemy 2 typed ORM). Same code on SQLite and Postgres.

Tables
- tasks:        one row per task (suite key, level, reference source)
- candidates:   one row per distinct (task, source hash): the code, where it came from (first producer)
- candidate_runs: every (candidate, run, stage) that produced it: a kernel several runs produce counts for each
- attempts:     every LLM generation, parsed or not (a response that cannot be parsed is kept with its reason)
- evaluations:  one row per evaluation of a candidate (device type, evaluator version, result, timing)
- runs / stages: pipeline runs and their stage records (status, manifests, checkpoint URIs, cache keys)
- eval_jobs:    the evaluation job queue (claimed with SELECT ... FOR UPDATE SKIP LOCKED on Postgres)

Changing a model means a new Alembic migration in ``kernelrl/store/migrations/versions/``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def _no_nul(value):
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


class SafeText(TypeDecorator):
    """TEXT that PostgreSQL can hold: a NUL character (which PostgreSQL text refuses, SQLite keeps) is stored as
    U+FFFD. A model's completion or a hostile candidate's error message may carry NUL: on the H100 run of
    2026-11-27 one GRPO completion did, and the crl step died on the insert (bench/results/*-h100x4-pipeline)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return _no_nul(value)


class SafeString(TypeDecorator):
    """VARCHAR(n) with the same NUL rule as SafeText (names, keys, worker ids, flags' text)."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return _no_nul(value)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class TaskRow(Base):
    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(SafeString(300), unique=True)
    name: Mapped[str] = mapped_column(SafeString(200))
    level: Mapped[int] = mapped_column(Integer)
    suite: Mapped[str] = mapped_column(SafeString(100))
    source: Mapped[str] = mapped_column(SafeText)
    source_hash: Mapped[str] = mapped_column(SafeString(64))
    # Task audit (e.g. the reference output does not depend on its inputs) and best known speedups live here.
    audit_flags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    candidates: Mapped[list[CandidateRow]] = relationship(back_populates="task")


class CandidateRow(Base):
    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("task_id", "source_hash", name="uq_candidate_task_source"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    source: Mapped[str] = mapped_column(SafeText)
    source_hash: Mapped[str] = mapped_column(SafeString(64))
    origin_stage: Mapped[str] = mapped_column(SafeString(50))  # seed | augment | selfsup | crl | optimize | import
    origin_model: Mapped[str | None] = mapped_column(SafeString(500))  # teacher/model id or checkpoint URI
    run_name: Mapped[str | None] = mapped_column(SafeString(200), index=True)
    prompt: Mapped[str | None] = mapped_column(SafeText)
    analysis: Mapped[str | None] = mapped_column(SafeText)  # "## Performance Analysis" section of the response
    design: Mapped[str | None] = mapped_column(SafeText)  # "## Algorithm Design" section
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    task: Mapped[TaskRow] = relationship(back_populates="candidates")
    evaluations: Mapped[list[EvaluationRow]] = relationship(back_populates="candidate")


class CandidateRunRow(Base):
    """A run (and the stage of it) that produced a candidate (migration 0003). ``candidates.run_name`` keeps the
    first producer; this table has them all, so reports and exemplar pools of every producing run count it."""

    __tablename__ = "candidate_runs"
    __table_args__ = (UniqueConstraint("candidate_id", "run_name", "stage", name="uq_candidate_run_stage"),
                      Index("ix_candidate_runs_run", "run_name", "stage"))

    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"), index=True)
    run_name: Mapped[str] = mapped_column(SafeString(200))
    stage: Mapped[str] = mapped_column(SafeString(50))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AttemptRow(Base):
    """Every generation, kept whatever happened to it (parse failure, duplicate, evaluated)."""

    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    candidate_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id", ondelete="SET NULL"))
    run_name: Mapped[str | None] = mapped_column(SafeString(200), index=True)
    stage: Mapped[str] = mapped_column(SafeString(50))
    model: Mapped[str | None] = mapped_column(SafeString(500))
    prompt: Mapped[str | None] = mapped_column(SafeText)
    response: Mapped[str | None] = mapped_column(SafeText)
    parse_error: Mapped[str | None] = mapped_column(SafeText)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    # Which exemplar snapshot built the prompt, and which exemplars it showed (contrastive RL).
    exemplar_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    snapshot: Mapped[int | None] = mapped_column(Integer)
    # Idempotency key for resumable stages: the same (run, stage, key) is written once.
    dedup_key: Mapped[str | None] = mapped_column(SafeString(200), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class EvaluationRow(Base):
    __tablename__ = "evaluations"

    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"), index=True)
    device_type: Mapped[str] = mapped_column(SafeString(200))
    evaluator_version: Mapped[str] = mapped_column(SafeString(50))
    settings_hash: Mapped[str] = mapped_column(SafeString(64), default="")
    executable: Mapped[bool] = mapped_column(Boolean)
    correct: Mapped[bool] = mapped_column(Boolean)
    speedup: Mapped[float] = mapped_column(Float)
    flags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    error: Mapped[str | None] = mapped_column(SafeText)
    timing: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    result: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # the whole EvalResult.to_dict()
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    purpose: Mapped[str] = mapped_column(SafeString(30), default="reward")  # reward | final | reverify
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    candidate: Mapped[CandidateRow] = relationship(back_populates="evaluations")

    __table_args__ = (Index("ix_eval_lookup", "candidate_id", "evaluator_version", "device_type"),)


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(SafeString(200), unique=True)
    recipe: Mapped[str] = mapped_column(SafeString(200))
    recipe_digest: Mapped[str] = mapped_column(SafeString(64), default="")
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(SafeString(30), default="running")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    stages: Mapped[list[StageRow]] = relationship(back_populates="run")


class StageRow(Base):
    __tablename__ = "stages"
    __table_args__ = (UniqueConstraint("run_id", "stage", name="uq_stage_run"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    stage: Mapped[str] = mapped_column(SafeString(50))
    status: Mapped[str] = mapped_column(SafeString(30), default="pending")  # pending|running|done|failed
    cache_key: Mapped[str | None] = mapped_column(SafeString(64))
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    checkpoint_uri: Mapped[str | None] = mapped_column(SafeString(1000))
    error: Mapped[str | None] = mapped_column(SafeText)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    run: Mapped[RunRow] = relationship(back_populates="stages")


class EvalJobRow(Base):
    """The evaluation queue. status: queued -> running -> done | failed (| verifying -> done while a suspicious
    speedup is re-measured elsewhere); a lapsed lease goes back to queued. See kernelrl/store/queue.py."""

    __tablename__ = "eval_jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"), index=True)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    settings_hash: Mapped[str] = mapped_column(SafeString(64), default="")
    device_kind: Mapped[str] = mapped_column(SafeString(50), default="any")  # cpu | cuda | any
    purpose: Mapped[str] = mapped_column(SafeString(30), default="reward")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(SafeString(20), default="queued", index=True)
    worker: Mapped[str | None] = mapped_column(SafeString(200))
    exclude_worker: Mapped[str | None] = mapped_column(SafeString(200))  # re-verification: not on this worker/GPU
    # ...until then (NULL: for ever); afterwards the excluded worker may take it (fresh-process fallback).
    exclude_until: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # Only workers of this device type (e.g. "NVIDIA H200") claim it; NULL: any worker of device_kind.
    device_type: Mapped[str | None] = mapped_column(SafeString(200))
    # A re-verification job points at its original job; the original waits in status 'verifying' with its
    # first measurement in pending_result until the re-measurement decides (migration 0002).
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("eval_jobs.id", ondelete="SET NULL"), index=True)
    pending_result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    evaluation_id: Mapped[int | None] = mapped_column(ForeignKey("evaluations.id", ondelete="SET NULL"))
    error: Mapped[str | None] = mapped_column(SafeText)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    claimed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_jobs_claim", "status", "priority", "id"),
                      Index("ix_jobs_inflight", "candidate_id", "settings_hash", "status"))
