"""drop ``ix_deliveries_project_id``: no query reads it, and every stored delivery wrote it (issue 11)

Every delivery the receiver stores is one B-tree insert per index on ``deliveries``, in the
delivery writer's transaction, under SQLite's one write lock (on PostgreSQL, server CPU). The
index on ``project_id`` served no reader:

- the quarantine lists filter ``status = 'quarantined'`` first, which
  ``ix_deliveries_status_received_at`` serves (with the order they page in); the project is a
  filter over those few rows (SQLite's plan, before and after: ``SEARCH deliveries USING INDEX
  ix_deliveries_status_received_at (status=?)``);
- every other read of a delivery is by its id, its source (``uq_delivery_dedup`` leads with
  ``source_id``, migration 0017) or its status;
- the foreign key to ``projects`` is checked on insert by the parent's primary key; the child's
  index would only serve a project's delete or re-keying, and no code path does either.

Measured (``bench/ingest.py``'s ack path, 20,000 deliveries a round, six rounds alternated,
three ``serve``s of one commit, docs/PERFORMANCE.md 2026-12-07 12:40): 59.2 % of the bare route
with the index, 60.9 % and 61.5 % without; the writer child 171 against 164 and 156 µs a row.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 12:50:00
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_deliveries_project_id", table_name="deliveries")


def downgrade() -> None:
    op.create_index("ix_deliveries_project_id", "deliveries", ["project_id"], unique=False)
