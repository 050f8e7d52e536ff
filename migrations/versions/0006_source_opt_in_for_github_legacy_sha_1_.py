"""source opt-in for GitHub legacy SHA-1 signatures

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 12:52:57.369253
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql  # noqa: F401  (JSONB on PostgreSQL)


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sources', schema=None) as batch_op:
        batch_op.add_column(sa.Column('allow_legacy_sha1', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('sources', schema=None) as batch_op:
        batch_op.drop_column('allow_legacy_sha1')
