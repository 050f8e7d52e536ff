"""web login links and web sessions (issue 15)

Revision ID: 0013
Revises: 0009
Create Date: 2026-12-01 01:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models.base

revision = '0013'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'login_links',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('human_id', sa.String(length=40), nullable=False),
        sa.Column('token_sha256', sa.String(length=64), nullable=False),
        sa.Column('created_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.Column('expires_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.Column('used_at', switchboard.models.base.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(['human_id'], ['humans.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('token_sha256'),
    )
    op.create_index(op.f('ix_login_links_human_id'), 'login_links', ['human_id'], unique=False)
    op.create_table(
        'web_sessions',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('human_id', sa.String(length=40), nullable=False),
        sa.Column('token_sha256', sa.String(length=64), nullable=False),
        sa.Column('created_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.Column('expires_at', switchboard.models.base.UTCDateTime(), nullable=False),
        sa.Column('ended_at', switchboard.models.base.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(['human_id'], ['humans.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('token_sha256'),
    )
    op.create_index(op.f('ix_web_sessions_human_id'), 'web_sessions', ['human_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_web_sessions_human_id'), table_name='web_sessions')
    op.drop_table('web_sessions')
    op.drop_index(op.f('ix_login_links_human_id'), table_name='login_links')
    op.drop_table('login_links')
