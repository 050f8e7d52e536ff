"""body digest for replay dedup on deliveries; per-source todo events

Revision ID: 0008
Revises: 0012
Create Date: 2026-12-01 01:50:00

``deliveries.body_digest`` (SHA-256 hex of the raw body, schemes without a signed timestamp)
with a unique constraint per source: a captured body re-sent with fresh headers is a
duplicate (issue 12 #7). ``sources.todo_events``: which event kinds become todos (``NULL``:
the provider's default list).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0008'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('body_digest', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
        batch_op.create_unique_constraint('uq_delivery_body_digest', ['source_id', 'body_digest'])
    with op.batch_alter_table('sources', schema=None) as batch_op:
        batch_op.add_column(sa.Column(
            'todo_events', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'),
            nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sources', schema=None) as batch_op:
        batch_op.drop_column('todo_events')
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_constraint('uq_delivery_body_digest', type_='unique')
        batch_op.drop_column('body_digest')
