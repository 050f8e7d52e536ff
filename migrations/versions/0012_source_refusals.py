"""source_refusals: per-source tallies of refused deliveries (issue 14)

Revision ID: 0012
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models.base

revision = '0012'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'source_refusals',
        sa.Column('source_id', sa.String(length=40), nullable=False),
        sa.Column('reason', sa.String(length=60), nullable=False),
        sa.Column('count', sa.Integer(), nullable=False),
        sa.Column('last_at', switchboard.models.base.JSONType, nullable=True),
        sa.Column('updated_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('source_id', 'reason'),
    )


def downgrade() -> None:
    op.drop_table('source_refusals')
