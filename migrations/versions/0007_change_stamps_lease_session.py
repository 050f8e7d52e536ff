"""change stamps bumped by triggers (sources, directory); todos.lease_session

Revision ID: 0007
Revises: 0008
Create Date: 2026-12-01 01:45:00

Issue 11: the receiver caches sources and secrets, and processing caches attribution and wake
recipients. ``change_stamps`` holds one counter per cache; triggers bump it on every change of
the tables the cache reads, from any process, so no write path can forget to invalidate:

- ``sources``: ``sources``, ``source_secrets``;
- ``directory``: ``sources`` (trust lists), ``identities``, ``project_owners``, ``grants``,
  ``agents``, ``projects``.

``todos.lease_session`` binds a lease to the session that claimed (issue 18 item 5).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0008'
branch_labels = None
depends_on = None

STAMPS = {
    "sources": ("sources", "source_secrets"),
    "directory": ("sources", "identities", "project_owners", "grants", "agents", "projects"),
}
_OPS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    op.create_table(
        'change_stamps',
        sa.Column('name', sa.String(length=40), nullable=False),
        sa.Column('value', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    for name in STAMPS:
        op.execute(f"INSERT INTO change_stamps (name, value) VALUES ('{name}', 0)")
    with op.batch_alter_table('todos', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lease_session', sa.String(length=80), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION switchboard_bump_stamp() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN UPDATE change_stamps SET value = value + 1 WHERE name = TG_ARGV[0]; RETURN NULL; END $$"
        )
        for name, tables in STAMPS.items():
            for table in tables:
                op.execute(f"CREATE TRIGGER trg_{table}_{name}_stamp AFTER INSERT OR UPDATE OR DELETE ON {table} "
                           f"FOR EACH STATEMENT EXECUTE FUNCTION switchboard_bump_stamp('{name}')")
    else:
        for name, tables in STAMPS.items():
            for table in tables:
                for what in _OPS:
                    op.execute(f"CREATE TRIGGER trg_{table}_{name}_stamp_{what.lower()} AFTER {what} ON {table} "
                               f"BEGIN UPDATE change_stamps SET value = value + 1 WHERE name = '{name}'; END")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name, tables in STAMPS.items():
            for table in tables:
                op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_{name}_stamp ON {table}")
        op.execute("DROP FUNCTION IF EXISTS switchboard_bump_stamp()")
    else:
        for name, tables in STAMPS.items():
            for table in tables:
                for what in _OPS:
                    op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_{name}_stamp_{what.lower()}")
    with op.batch_alter_table('todos', schema=None) as batch_op:
        batch_op.drop_column('lease_session')
    op.drop_table('change_stamps')
