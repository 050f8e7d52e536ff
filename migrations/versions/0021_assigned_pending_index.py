"""ix_todos_assigned: the pending todos assigned to an agent (issue 11)

What waits for an agent when its stream attaches (``switchboard.notify.wakes.waiting_for``) is
the pending todos assigned to it and the unassigned ones of its projects. Read as one ``OR``,
neither half had an index of its own: SQLite and PostgreSQL read every pending todo of every
project on each attach (17 ms with 20,000 pending in a project the agent cannot see). The
unassigned half reads ``ix_todos_claim_any`` by project; this partial index serves the assigned
half and holds only the pending todos with an assignee.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04 15:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_WHERE = sa.text("state = 'pending' AND assigned_agent_id IS NOT NULL")


def upgrade() -> None:
    op.create_index("ix_todos_assigned", "todos", ["assigned_agent_id", "created_at", "id"], unique=False,
                    sqlite_where=_WHERE, postgresql_where=_WHERE)


def downgrade() -> None:
    op.drop_index("ix_todos_assigned", table_name="todos")
