"""commit-ordered feed event ids on PostgreSQL

Revision ID: 0014
Revises: 0006
Create Date: 2026-12-01 01:50:00

On PostgreSQL a sequence hands out ids before commit, so a reader that remembers "the last id
I saw" skips an event whose transaction started earlier and committed later (issue 18.6). From
here on a feed event's id is ``(inserting transaction id << 16) | n``, ``n`` counting the
transaction's own events from 0: ids are ordered by transaction id first, and readers take only
ids below ``pg_snapshot_xmin(pg_current_snapshot()) << 16`` (every transaction below the
horizon has finished, every later one gets a larger id). Existing ids are far below any new
one, so order is kept. SQLite has one writer; nothing changes there.
"""

from __future__ import annotations

from alembic import op

revision = '0014'
down_revision = '0006'
branch_labels = None
depends_on = None

FUNCTION = """
CREATE OR REPLACE FUNCTION switchboard_feed_event_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := COALESCE(NULLIF(current_setting('switchboard.feed_n', true), ''), '0')::integer;
BEGIN
    IF n >= 65536 THEN
        RAISE EXCEPTION 'more than 65536 feed events in one transaction';
    END IF;
    PERFORM set_config('switchboard.feed_n', (n + 1)::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 16) | n;
END
$$;
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION)
    op.execute("ALTER TABLE feed_events ALTER COLUMN id SET DEFAULT switchboard_feed_event_id()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE feed_events ALTER COLUMN id "
               "SET DEFAULT nextval(pg_get_serial_sequence('feed_events', 'id'))")
    op.execute("DROP FUNCTION IF EXISTS switchboard_feed_event_id()")
