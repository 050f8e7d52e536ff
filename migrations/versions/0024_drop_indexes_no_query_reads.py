"""drop three indexes that no query reads, on tables written on the hot paths (issue 11)

Every row written is one B-tree insert per index on its table, in the writer's transaction,
under SQLite's one write lock (on PostgreSQL, server CPU). Three indexes served no reader:

- ``ix_deliveries_project_id``, written by every stored delivery (the receiver's writer):
  the quarantine lists filter ``status = 'quarantined'`` first, which
  ``ix_deliveries_status_received_at`` serves with the order they page in (SQLite's plan,
  before and after: ``SEARCH deliveries USING INDEX ix_deliveries_status_received_at
  (status=?)``); every other read of a delivery is by its id, its source (``uq_delivery_dedup``
  leads with ``source_id``, migration 0017) or its status.
- ``ix_feed_kind_id`` (``kind, id``), written by every feed event (three or more per todo:
  created, claimed, completed): it came with migration 0005 for the subscription seed, then
  ``max(id) WHERE kind IN (...)`` over every project; the seed now also filters the projects
  the agent may read, and reads ``ix_feed_project_kind_id`` as the trailer does.
- ``ix_secret_refs_project_id``, written by every secret intake swaps for a ref: refs are read
  by ``ref`` (the primary key), and the key rotation reads them all.

None of the three columns is a foreign key's child side that a parent's delete or re-keying
needs: no code path deletes or re-keys a project. Found by capturing every statement the test
suite runs and reading SQLite's plan for each (a helper's audit, docs/PERFORMANCE.md
2026-12-07 12:26).

Measured for the first (``bench/ingest.py``'s ack path, 20,000 deliveries a round, alternated
with the bare route): 59.2 % of the bare route with the index against 60.9 % and 61.5 % (six
rounds, three ``serve``s), and 59.2 % against 60.3 % (eight rounds); the writer child 165-171
against 156-164 µs a row.

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

UNREAD = (
    ("ix_deliveries_project_id", "deliveries", ["project_id"]),
    ("ix_feed_kind_id", "feed_events", ["kind", "id"]),
    ("ix_secret_refs_project_id", "secret_refs", ["project_id"]),
)


def upgrade() -> None:
    for name, table, _ in UNREAD:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for name, table, columns in UNREAD:
        op.create_index(name, table, columns, unique=False)
