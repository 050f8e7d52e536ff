"""ix_todos_ring holds only the pending todos still to ring (issue 11)

A pending todo is woken at most eight times (``MAX_RINGS``, ``switchboard/models/work.py``);
after that it stays pending, with the oldest ``rung_at``, until an agent takes it or a human
cancels it. In ``ix_todos_ring`` (``state = 'pending'``) those todos came first in the re-ring
pass's backoff read, which walked past every one of them on each pass, the idle check included:
with 40,000 of them 3.8 ms per check on SQLite and 1.2 ms on PostgreSQL, and as long again in
the maintenance write transaction when anything was due, growing with the backlog. The index
now holds only the todos rung fewer than eight times; the pass repeats that predicate as SQL
literals so that both databases use it.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_TO_RING = sa.text("state = 'pending' AND ring_count < 8")
_PENDING = sa.text("state = 'pending'")


def upgrade() -> None:
    op.drop_index("ix_todos_ring", table_name="todos")
    op.create_index("ix_todos_ring", "todos", ["rung_at", "ring_count"], unique=False,
                    sqlite_where=_TO_RING, postgresql_where=_TO_RING)


def downgrade() -> None:
    op.drop_index("ix_todos_ring", table_name="todos")
    op.create_index("ix_todos_ring", "todos", ["rung_at", "ring_count"], unique=False,
                    sqlite_where=_PENDING, postgresql_where=_PENDING)
