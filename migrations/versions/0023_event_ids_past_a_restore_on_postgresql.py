"""feed and agent event ids stay ahead of restored ones on PostgreSQL (an offset to xids)

A feed or agent event id on PostgreSQL is ``(transaction id << 16) | n`` (migration 0014),
and readers keep ids below ``pg_snapshot_xmin << 16``. A dump restored into another cluster
(``pg_dump`` / ``pg_restore``, the backup path in the README) brings ids made from that
cluster's transaction ids, which are usually far ahead of the new cluster's: every new event
got a smaller id than the restored ones, so every cursor and ``Last-Event-ID`` kept from before
skipped it, and the restored events stood above the readers' horizon, unread.

Both sides now add ``switchboard_xid_offset()`` to the transaction id: a SQL function holding
one constant (0 here), which the planner inlines. The migration environment at head
(``migrations/env.py``: ``switchboard migrate``, ``serve``, ``worker`` and ``init`` at start-up,
``alembic upgrade head``) raises it past the largest feed
or agent event id any row holds when that is ahead of the transaction ids
(``switchboard.feed.events.align_ids``). SQLite is not concerned (migration 0022).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04 19:40:00
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

OFFSET = """
CREATE OR REPLACE FUNCTION switchboard_xid_offset() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 0::bigint $$;
"""

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
    RETURN ((pg_current_xact_id()::text::bigint + switchboard_xid_offset()) << 16) | n;
END
$$;
"""

FUNCTION_0014 = FUNCTION.replace("(pg_current_xact_id()::text::bigint + switchboard_xid_offset())",
                                 "pg_current_xact_id()::text::bigint")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(OFFSET)
    op.execute(FUNCTION)


def downgrade() -> None:
    # After a raise (a restore), ids without the offset go below the ones held: the readers of
    # the older code skip them until the transaction ids catch up, as before this migration.
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION_0014)
    op.execute("DROP FUNCTION IF EXISTS switchboard_xid_offset()")
