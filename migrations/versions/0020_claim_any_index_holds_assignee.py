"""ix_todos_claim_any holds assigned_agent_id: a claim over several projects reads it alone (issue 11)

A claim with no queue over two or more projects (an agent granted work on several, claiming
"anything") picks ``WHERE project_id IN (...) AND state = 'pending' AND (assigned_agent_id IS
NULL OR assigned_agent_id = :agent) ORDER BY priority DESC, created_at, id LIMIT 1``. SQLite
(no planner statistics here) read it through ``ix_todos_project_created``, every todo of those
projects in every state, done ones included: 25 ms per claim with 50,000 todos, in the write
transaction. With the assignee in ``ix_todos_claim_any`` the index answers the pick alone
(covering), and SQLite chooses it: 0.02 ms. PostgreSQL already used it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_PENDING = sa.text("state = 'pending'")
_BEFORE = ["project_id", sa.text("priority DESC"), "created_at", "id"]


def upgrade() -> None:
    op.drop_index("ix_todos_claim_any", table_name="todos")
    op.create_index("ix_todos_claim_any", "todos", [*_BEFORE, "assigned_agent_id"], unique=False,
                    sqlite_where=_PENDING, postgresql_where=_PENDING)


def downgrade() -> None:
    op.drop_index("ix_todos_claim_any", table_name="todos")
    op.create_index("ix_todos_claim_any", "todos", _BEFORE, unique=False,
                    sqlite_where=_PENDING, postgresql_where=_PENDING)
