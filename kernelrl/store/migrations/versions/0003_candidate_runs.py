"""candidate_runs: which runs (and which of their stages) produced each candidate

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28 09:00:00

A candidate is one row per (task, source hash), so a kernel that several runs produce (the deterministic
seed-corpus teacher always does) used to belong to the first run only (``candidates.run_name``). The link table
records every (candidate, run, stage) that produced it, so each run's reports and exemplar pools count it.

Backfill: one link per candidate's own (run_name, origin_stage), and one per distinct (run_name, stage) of the
attempts that produced a candidate (every stage records its attempts with their candidate).
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'candidate_runs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('candidate_id', sa.Integer(), nullable=False),
        sa.Column('run_name', sa.String(length=200), nullable=False),
        sa.Column('stage', sa.String(length=50), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['candidate_id'], ['candidates.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('candidate_id', 'run_name', 'stage', name='uq_candidate_run_stage'),
    )
    op.create_index('ix_candidate_runs_run', 'candidate_runs', ['run_name', 'stage'], unique=False)
    op.create_index('ix_candidate_runs_candidate_id', 'candidate_runs', ['candidate_id'], unique=False)
    # Backfill in SQL (same text on SQLite and Postgres); the UNION removes duplicates between the two sources.
    op.execute(
        "INSERT INTO candidate_runs (candidate_id, run_name, stage, created_at) "
        "SELECT candidate_id, run_name, stage, MIN(created_at) FROM ("
        " SELECT id AS candidate_id, run_name, origin_stage AS stage, created_at FROM candidates"
        "  WHERE run_name IS NOT NULL"
        " UNION ALL"
        " SELECT candidate_id, run_name, stage, created_at FROM attempts"
        "  WHERE run_name IS NOT NULL AND candidate_id IS NOT NULL"
        ") AS links GROUP BY candidate_id, run_name, stage")


def downgrade() -> None:
    op.drop_index('ix_candidate_runs_candidate_id', table_name='candidate_runs')
    op.drop_index('ix_candidate_runs_run', table_name='candidate_runs')
    op.drop_table('candidate_runs')
