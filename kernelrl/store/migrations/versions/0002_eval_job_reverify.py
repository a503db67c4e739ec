"""eval_jobs: device type, expiring exclusion, re-verification parent and pending result

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 11:00:00

- device_type:    a job only for workers of this device type (e.g. "NVIDIA H200"); NULL: any of device_kind.
- exclude_until:  the exclusion of ``exclude_worker`` lapses then (NULL: for ever), so a re-verification that no
                  other worker of the type took in time falls back to the excluded worker (in fresh processes).
- parent_id:      a re-verification job's original job.
- pending_result: the original measurement of a job in status 'verifying', kept until its re-measurement decides.
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('eval_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('device_type', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('exclude_until', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('parent_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('pending_result', sa.JSON(), nullable=True))
        batch_op.create_foreign_key('fk_eval_jobs_parent_id', 'eval_jobs', ['parent_id'], ['id'],
                                    ondelete='SET NULL')
        batch_op.create_index('ix_eval_jobs_parent_id', ['parent_id'], unique=False)
        batch_op.create_index('ix_jobs_inflight', ['candidate_id', 'settings_hash', 'status'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('eval_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_inflight')
        batch_op.drop_index('ix_eval_jobs_parent_id')
        batch_op.drop_constraint('fk_eval_jobs_parent_id', type_='foreignkey')
        batch_op.drop_column('pending_result')
        batch_op.drop_column('parent_id')
        batch_op.drop_column('exclude_until')
        batch_op.drop_column('device_type')
