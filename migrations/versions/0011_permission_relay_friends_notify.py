"""permission relay, friend requests and friendships, per-human notification targets

Inbox items gain the permission-prompt fields (bound session, request id, verdict state) and
``used_at``; permission and friend items and their feed events belong to a human, not a project,
so ``inbox_items.project_id`` and ``feed_events.project_id`` become nullable.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 01:26:18.680284
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql  # noqa: F401  (JSONB on PostgreSQL)
import sqlmodel
import switchboard.models.base

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('notify_targets',
    sa.Column('human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('url', sa.LargeBinary(), nullable=False),
    sa.Column('last_sent_at', switchboard.models.base.UTCDateTime(), nullable=True),
    sa.Column('pending', sa.Integer(), nullable=False),
    sa.Column('pending_text', sa.Text(), nullable=True),
    sa.Column('created_at', switchboard.models.base.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['human_id'], ['humans.id'], ),
    sa.PrimaryKeyConstraint('human_id')
    )
    op.create_table('friend_requests',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('from_agent_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('to_agent_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('from_human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('to_human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('queues', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('inbox_item_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True),
    sa.Column('decided_by_human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True),
    sa.Column('decided_via', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=True),
    sa.Column('decided_at', switchboard.models.base.UTCDateTime(), nullable=True),
    sa.Column('created_at', switchboard.models.base.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['from_agent_id'], ['agents.id'], ),
    sa.ForeignKeyConstraint(['from_human_id'], ['humans.id'], ),
    sa.ForeignKeyConstraint(['to_agent_id'], ['agents.id'], ),
    sa.ForeignKeyConstraint(['to_human_id'], ['humans.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('friend_requests', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_friend_requests_from_agent_id'), ['from_agent_id'], unique=False)
        batch_op.create_index('ix_friend_requests_to', ['to_agent_id', 'status'], unique=False)

    op.create_table('friendships',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('request_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('from_agent_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('to_agent_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('from_human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('to_human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('queues', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('approved_by_human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('approved_via', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('created_at', switchboard.models.base.UTCDateTime(), nullable=False),
    sa.Column('revoked_at', switchboard.models.base.UTCDateTime(), nullable=True),
    sa.Column('revoked_by_human_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True),
    sa.ForeignKeyConstraint(['from_agent_id'], ['agents.id'], ),
    sa.ForeignKeyConstraint(['from_human_id'], ['humans.id'], ),
    sa.ForeignKeyConstraint(['request_id'], ['friend_requests.id'], ),
    sa.ForeignKeyConstraint(['to_agent_id'], ['agents.id'], ),
    sa.ForeignKeyConstraint(['to_human_id'], ['humans.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('request_id')
    )
    with op.batch_alter_table('friendships', schema=None) as batch_op:
        batch_op.create_index('ix_friendships_from', ['from_agent_id', 'revoked_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_friendships_to_agent_id'), ['to_agent_id'], unique=False)

    with op.batch_alter_table('feed_events', schema=None) as batch_op:
        batch_op.alter_column('project_id',
               existing_type=sa.VARCHAR(length=40),
               nullable=True)

    with op.batch_alter_table('inbox_items', schema=None) as batch_op:
        batch_op.add_column(sa.Column('session_id', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=True))
        batch_op.add_column(sa.Column('request_id', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=True))
        batch_op.add_column(sa.Column('tool_name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True))
        batch_op.add_column(sa.Column('input_preview', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('verdict_state', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=True))
        batch_op.add_column(sa.Column('verdict_sent_at', switchboard.models.base.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('used_at', switchboard.models.base.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('subject_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
        batch_op.alter_column('project_id',
               existing_type=sa.VARCHAR(length=40),
               nullable=True)
        batch_op.create_index('ix_inbox_human_request', ['human_id', 'request_id'], unique=False)
        batch_op.create_index('ix_inbox_session_verdict', ['session_id', 'verdict_state'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('inbox_items', schema=None) as batch_op:
        batch_op.drop_index('ix_inbox_session_verdict')
        batch_op.drop_index('ix_inbox_human_request')
        batch_op.alter_column('project_id',
               existing_type=sa.VARCHAR(length=40),
               nullable=False)
        batch_op.drop_column('subject_id')
        batch_op.drop_column('used_at')
        batch_op.drop_column('verdict_sent_at')
        batch_op.drop_column('verdict_state')
        batch_op.drop_column('input_preview')
        batch_op.drop_column('tool_name')
        batch_op.drop_column('request_id')
        batch_op.drop_column('session_id')

    with op.batch_alter_table('feed_events', schema=None) as batch_op:
        batch_op.alter_column('project_id',
               existing_type=sa.VARCHAR(length=40),
               nullable=False)

    with op.batch_alter_table('friendships', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_friendships_to_agent_id'))
        batch_op.drop_index('ix_friendships_from')

    op.drop_table('friendships')
    with op.batch_alter_table('friend_requests', schema=None) as batch_op:
        batch_op.drop_index('ix_friend_requests_to')
        batch_op.drop_index(batch_op.f('ix_friend_requests_from_agent_id'))

    op.drop_table('friend_requests')
    op.drop_table('notify_targets')
