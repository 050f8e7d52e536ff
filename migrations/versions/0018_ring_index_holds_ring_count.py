"""ix_todos_ring holds ring_count as well as rung_at (issue 11)

The re-ring pass reads the pending todos whose backoff has passed, the backoff being one
``rung_at`` cutoff per ``ring_count`` range (``notify/wakes.py``). With ``rung_at`` alone in
the index every todo rung more than 30 s ago was fetched from the table to read its
``ring_count``: with 30,000 pending todos waiting out their backoff the maintenance pass's
check took 8-15 ms on SQLite and 10 ms on PostgreSQL, and the pass 9-12 ms in its write
transaction when anything else was due; with ``ring_count`` in the index 5 and 2 ms.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_PENDING = sa.text("state = 'pending'")


def upgrade() -> None:
    op.drop_index("ix_todos_ring", table_name="todos")
    op.create_index("ix_todos_ring", "todos", ["rung_at", "ring_count"], unique=False,
                    sqlite_where=_PENDING, postgresql_where=_PENDING)


def downgrade() -> None:
    op.drop_index("ix_todos_ring", table_name="todos")
    op.create_index("ix_todos_ring", "todos", ["rung_at"], unique=False,
                    sqlite_where=_PENDING, postgresql_where=_PENDING)
