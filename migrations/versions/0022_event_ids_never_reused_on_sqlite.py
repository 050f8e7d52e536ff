"""feed and agent event ids are never reused on SQLite (AUTOINCREMENT)

A SQLite ``INTEGER PRIMARY KEY`` without ``AUTOINCREMENT`` takes one more than the largest id in
the table (https://www.sqlite.org/autoinc.html). Retention deletes old events: agent events
after a day (``notify.sessions.prune``), feed events after ``retention_days``
(``switchboard.retention``). Once a quiet spell had emptied a table, ids began again at 1, and
every position kept from before stood ahead of the new events: a stream resumed with its
``Last-Event-ID``, an agent's feed or subscription cursor, ``inbox_read``'s ``since`` (an inbox
item's ``seq`` is a feed id) all skipped what came next until the ids caught up. With
``AUTOINCREMENT`` SQLite keeps the largest id ever given in ``sqlite_sequence`` and never goes
below it.

SQLite cannot add ``AUTOINCREMENT`` to a table: both tables are rebuilt (Alembic's batch mode:
copy, drop, rename; indexes and keys as the models give them), which sets their counters to
the largest id kept. A feed counter is then raised to the largest feed id any row still refers
to (cursors, subscription seeds, inbox items), in case the feed was emptied before this
migration. No row holds agent-event ids: those given and pruned before this migration can be
given once more, and a stream resumed past every id given starts afresh
(``switchboard.feed.events.ahead``). PostgreSQL's ids come from transaction ids (migration
0014) and never go back within a cluster: nothing changes there.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04 19:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_TABLES = ("feed_events", "agent_events")
# Every column that holds feed event ids (DESIGN.md §6.4, §6.7).
_FEED_POSITIONS = ("SELECT max(id) FROM feed_events", "SELECT max(position) FROM agent_cursors",
                   "SELECT max(seed_event_id) FROM subscriptions", "SELECT max(seq) FROM inbox_items",
                   "SELECT max(resolved_event_id) FROM inbox_items")


def _rebuild(autoincrement: bool) -> None:
    for table in _TABLES:
        with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}):
            pass


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(True)
    floor = max((op.get_bind().exec_driver_sql(q).scalar() or 0) for q in _FEED_POSITIONS)
    # The rebuild's copy left a row for each table that had any; a table copied empty has none.
    op.execute("DELETE FROM sqlite_sequence WHERE name = 'feed_events'")
    op.execute(f"INSERT INTO sqlite_sequence (name, seq) VALUES ('feed_events', {int(floor)})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(False)
