"""agent sessions and durable agent stream events

Revision ID: 0010
Revises: 0007
Create Date: 2026-12-01 01:40:00

On PostgreSQL ``agent_events.id`` takes the commit-ordered ids of migration 0014
(``switchboard_feed_event_id()``: transaction id << 16 | n), so a stream reading below the
oldest open transaction never skips an event committed late (the issue 18.6 class).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

import switchboard.models.base

revision = '0010'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'agent_sessions',
        sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
        sa.Column('agent_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column('attached_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.Column('seen_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.Column('last_woken_at', switchboard.models.base.UTCDateTime(), nullable=True),
        sa.Column('stream_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.ForeignKeyConstraint(['agent_id'], ['agents.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_agent_sessions_agent_seen', 'agent_sessions', ['agent_id', 'seen_at'], unique=False)
    op.create_table(
        'agent_events',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('agent_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column('session_id', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=True),
        sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column('data', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=True),
        sa.Column('created_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['agent_id'], ['agents.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_agent_events_agent_id', 'agent_events', ['agent_id', 'id'], unique=False)
    op.create_index('ix_agent_events_created', 'agent_events', ['created_at'], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE agent_events ALTER COLUMN id SET DEFAULT switchboard_feed_event_id()")


def downgrade() -> None:
    op.drop_index('ix_agent_events_created', table_name='agent_events')
    op.drop_index('ix_agent_events_agent_id', table_name='agent_events')
    op.drop_table('agent_events')
    op.drop_index('ix_agent_sessions_agent_seen', table_name='agent_sessions')
    op.drop_table('agent_sessions')
