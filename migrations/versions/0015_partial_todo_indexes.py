"""partial indexes on todos by state, and (project_id, created_at, id) for lists (issue 11)

Each state-driven index of ``todos`` now holds only the rows in the state its reader looks
for (``WHERE state = 'pending'`` for claims and rings, ``'claimed'`` for the reaper,
``'failed'`` for retries and dead letters, ``'cancelled'`` for counting them): a claim or a
complete updates at most two of them instead of five, and done todos sit in none. Lists get
their own index in cursor order.

On PostgreSQL this rebuilds the indexes inside the migration's transaction (``todos`` is
locked against writes meanwhile: README, Operations).

Revision ID: 0015
Revises: 0013
Create Date: 2026-12-01 06:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0013"
branch_labels = None
depends_on = None


def _where(state: str) -> dict[str, object]:
    clause = sa.text(f"state = '{state}'")
    return {"sqlite_where": clause, "postgresql_where": clause}


PARTIAL = (
    (
        "ix_todos_claim_queue",
        ["project_id", "queue", sa.text("priority DESC"), "created_at", "id"],
        "pending",
    ),
    ("ix_todos_claim_any", ["project_id", sa.text("priority DESC"), "created_at", "id"], "pending"),
    ("ix_todos_lease", ["lease_expires_at"], "claimed"),
    ("ix_todos_retry", ["next_retry_at"], "failed"),
    ("ix_todos_ring", ["rung_at"], "pending"),
)
# New ones (nothing to drop first): cancelled todos, for counting them without a table scan.
NEW_PARTIAL = (("ix_todos_cancelled", ["updated_at"], "cancelled"),)
FULL = (
    ("ix_todos_claim_queue", ["project_id", "queue", "state", sa.text("priority DESC"), "created_at", "id"]),
    ("ix_todos_claim_any", ["project_id", "state", sa.text("priority DESC"), "created_at", "id"]),
    ("ix_todos_lease", ["state", "lease_expires_at"]),
    ("ix_todos_retry", ["state", "next_retry_at"]),
    ("ix_todos_ring", ["state", "rung_at"]),
)


def upgrade() -> None:
    for name, _ in FULL:
        op.drop_index(name, table_name="todos")
    for name, columns, state in PARTIAL + NEW_PARTIAL:
        op.create_index(name, "todos", columns, unique=False, **_where(state))
    op.create_index("ix_todos_project_created", "todos", ["project_id", "created_at", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_todos_project_created", table_name="todos")
    for name, _, _ in PARTIAL + NEW_PARTIAL:
        op.drop_index(name, table_name="todos")
    for name, columns in FULL:
        op.create_index(name, "todos", columns, unique=False)
