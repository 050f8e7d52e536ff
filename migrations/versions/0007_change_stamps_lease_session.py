"""change stamps bumped by triggers on sources/source_secrets; todos.lease_session

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 01:45:00

The receiver caches sources and secrets (issue 11); the ``sources`` stamp, bumped by triggers
on every change of ``sources`` or ``source_secrets`` from any process, invalidates it.
``todos.lease_session`` binds a lease to the session that claimed (issue 18 item 5).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

_TABLES = ("sources", "source_secrets")
_OPS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    op.create_table(
        'change_stamps',
        sa.Column('name', sa.String(length=40), nullable=False),
        sa.Column('value', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    op.execute("INSERT INTO change_stamps (name, value) VALUES ('sources', 0)")
    with op.batch_alter_table('todos', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lease_session', sa.String(length=80), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION switchboard_bump_sources_stamp() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN UPDATE change_stamps SET value = value + 1 WHERE name = 'sources'; RETURN NULL; END $$"
        )
        for table in _TABLES:
            op.execute(f"CREATE TRIGGER trg_{table}_stamp AFTER INSERT OR UPDATE OR DELETE ON {table} "
                       "FOR EACH STATEMENT EXECUTE FUNCTION switchboard_bump_sources_stamp()")
    else:
        for table in _TABLES:
            for what in _OPS:
                op.execute(f"CREATE TRIGGER trg_{table}_stamp_{what.lower()} AFTER {what} ON {table} "
                           "BEGIN UPDATE change_stamps SET value = value + 1 WHERE name = 'sources'; END")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for table in _TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_stamp ON {table}")
        op.execute("DROP FUNCTION IF EXISTS switchboard_bump_sources_stamp()")
    else:
        for table in _TABLES:
            for what in _OPS:
                op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_stamp_{what.lower()}")
    with op.batch_alter_table('todos', schema=None) as batch_op:
        batch_op.drop_column('lease_session')
    op.drop_table('change_stamps')
