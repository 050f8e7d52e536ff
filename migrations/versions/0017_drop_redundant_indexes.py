"""drop five single-column indexes that a composite index already leads with (issue 11)

Each index is one more B-tree insert per row written, under SQLite's one write lock, and on
PostgreSQL server CPU. Five single-column indexes duplicated the leading column of a unique
constraint or a composite index on the same table, which serves every reader of that column
(equality look-ups, foreign-key checks of a parent's delete) as well:

- ``ix_deliveries_source_id``: ``uq_delivery_dedup (source_id, dedup_key)``; every delivery
  the receiver stores wrote six indexes, now five.
- ``ix_attempts_todo_id``: ``uq_attempt_number (todo_id, number)``; every claim inserts an
  attempt.
- ``ix_grants_agent_id``: ``uq_grant (agent_id, project_id)``.
- ``ix_inbox_items_human_id``: ``ix_inbox_human_request (human_id, request_id)``.
- ``ix_project_owners_project_id``: ``uq_project_owner (project_id, human_id)``.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 17:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

REDUNDANT = (
    ("ix_deliveries_source_id", "deliveries", "source_id"),
    ("ix_attempts_todo_id", "attempts", "todo_id"),
    ("ix_grants_agent_id", "grants", "agent_id"),
    ("ix_inbox_items_human_id", "inbox_items", "human_id"),
    ("ix_project_owners_project_id", "project_owners", "project_id"),
)


def upgrade() -> None:
    for name, table, _ in REDUNDANT:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for name, table, column in REDUNDANT:
        op.create_index(name, table, [column], unique=False)
