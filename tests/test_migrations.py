"""Migrations: upgrade an empty database to head, then models and schema agree (SQLite, PostgreSQL)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.models import metadata
from tests.services import fresh_postgres_database

EXPRESSION_INDEXES = {"ix_todos_claim_queue", "ix_todos_claim_any"}


def _expression_index(diff: object) -> bool:
    return (isinstance(diff, tuple) and diff[0] in ("add_index", "remove_index")
            and getattr(diff[1], "name", None) in EXPRESSION_INDEXES)


def _normal(predicate: str) -> str:
    """``((state)::text = 'pending'::text) AND (ring_count < 8)`` → ``state='pending'andring_count<8``."""
    return re.sub(r"::\w+|[()\s]", "", predicate).lower()


def _predicates(conn: sa.Connection, dialect: str) -> dict[str, str]:
    found = {}
    for table in sa.inspect(conn).get_table_names():
        for ix in sa.inspect(conn).get_indexes(table):
            where = ix.get("dialect_options", {}).get(f"{dialect}_where")
            if where is not None:
                found[ix["name"]] = _normal(str(where))
    return found


def _model_predicates(dialect: str) -> dict[str, str]:
    return {ix.name: _normal(str(ix.dialect_options[dialect]["where"]))
            for table in metadata.tables.values() for ix in table.indexes
            if ix.dialect_options[dialect]["where"] is not None}


def _assert_schema_matches(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diffs = [d for d in compare_metadata(ctx, metadata) if not _expression_index(d)]
            assert diffs == [], diffs
            # Alembic cannot compare expression indexes (``priority DESC``): check they exist.
            # And their plain columns, in order (0020 added the assignee to ix_todos_claim_any).
            # The names as the inspector gives them (``priority DESC``: ``priority``).
            found = {ix["name"]: [c for c in ix["column_names"] if c is not None]
                     for ix in sa.inspect(conn).get_indexes("todos")}
            model = {ix.name: [c.name if isinstance(c, sa.Column) else str(c).split()[0] for c in ix.expressions]
                     for ix in metadata.tables["todos"].indexes if ix.name in EXPRESSION_INDEXES}
            assert {name: found.get(name) for name in EXPRESSION_INDEXES} == model
            # Nor partial indexes' predicates: a query that repeats the model's predicate must
            # find the same one in the database (migration 0019 changed ix_todos_ring's).
            assert _predicates(conn, conn.dialect.name) == _model_predicates(conn.dialect.name)
            # Nor SQLite's AUTOINCREMENT (migration 0022): the tables the models mark have it.
            if conn.dialect.name == "sqlite":
                tables = conn.execute(sa.text("SELECT name FROM sqlite_master WHERE type = 'table' "
                                              "AND sql LIKE '%AUTOINCREMENT%'")).scalars()
                assert set(tables) == {t.name for t in metadata.tables.values()
                                       if t.dialect_options["sqlite"]["autoincrement"]}
            assert ctx.get_current_revision() is not None
    finally:
        engine.dispose()


pytestmark = pytest.mark.filterwarnings("ignore:autogenerate skipping:UserWarning")


def test_sqlite_empty_database_upgrades_to_head(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    upgrade(settings)
    _assert_schema_matches(settings.database_url)
    upgrade(settings)  # idempotent at head


def test_postgresql_empty_database_upgrades_to_head(postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url))
    upgrade(settings)
    _assert_schema_matches(settings.database_url)


def _refused_rows_lose_their_dedup(settings: Settings) -> None:
    """0016: a delivery refused 400 at receipt (failed, never processed, no body) loses its
    dedup key and body digest; one acknowledged and failed in processing keeps them."""
    from alembic import command

    from switchboard.db import alembic_config

    command.upgrade(alembic_config(settings), "0015")
    engine = sa.create_engine(settings.database_url)
    rows = [("dlv_refused", None, "malformed_payload"), ("dlv_processed", "2026-12-01 10:00:00", "malformed_payload")]
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO projects (id, name, created_at) VALUES ('pr_1', 'acme', '2026-12-01')"))
            conn.execute(sa.text("INSERT INTO sources (id, project_id, provider, queue, enabled, allow_legacy_sha1, "
                                 "created_at) VALUES ('src_1', 'pr_1', 'github', 'q', true, false, '2026-12-01')"))
            for delivery_id, processed_at, code in rows:
                conn.execute(sa.text(
                    "INSERT INTO deliveries (id, source_id, project_id, dedup_key, body_digest, status, body_bytes, "
                    "process_failures, received_at, processed_at, error_code) VALUES (:id, 'src_1', 'pr_1', :key, "
                    ":digest, 'failed', 10, 0, '2026-12-01 09:00:00', :processed, :code)"),
                    {"id": delivery_id, "key": f"key-{delivery_id}", "digest": f"digest-{delivery_id}",
                     "processed": processed_at, "code": code})
        upgrade(settings)
        with engine.connect() as conn:
            found = dict(conn.execute(sa.text("SELECT id, dedup_key FROM deliveries")).all())
            digests = dict(conn.execute(sa.text("SELECT id, body_digest FROM deliveries")).all())
    finally:
        engine.dispose()
    assert found == {"dlv_refused": None, "dlv_processed": "key-dlv_processed"}
    assert digests == {"dlv_refused": None, "dlv_processed": "digest-dlv_processed"}


def test_sqlite_refused_deliveries_lose_their_dedup(tmp_path: Path) -> None:
    _refused_rows_lose_their_dedup(Settings(home=tmp_path))


def test_postgresql_refused_deliveries_lose_their_dedup(postgres_url: str, tmp_path: Path) -> None:
    _refused_rows_lose_their_dedup(Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url)))


def _redundant_indexes(url: str) -> list[str]:
    """Full (not partial) indexes whose columns are the leading columns of another full index
    or unique constraint on the same table: each costs a B-tree insert per row and serves no
    reader the longer one does not (issue 11, migration 0017)."""
    engine = sa.create_engine(url)
    found = []
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            for table in inspector.get_table_names():
                full = [(ix["name"], tuple(ix["column_names"])) for ix in inspector.get_indexes(table)
                        if not any(k.endswith("_where") and v is not None
                                   for k, v in ix.get("dialect_options", {}).items())]
                full += [(uq["name"], tuple(uq["column_names"])) for uq in inspector.get_unique_constraints(table)]
                for name, columns in full:
                    if None in columns:  # an expression index
                        continue
                    if any(other != name and len(longer) > len(columns) and longer[:len(columns)] == columns
                           for other, longer in full):
                        found.append(f"{table}.{name}{columns}")
    finally:
        engine.dispose()
    return found


def _downgrade_restores_the_indexes(settings: Settings) -> None:
    from alembic import command

    from switchboard.db import alembic_config

    upgrade(settings)
    assert _redundant_indexes(settings.database_url) == []
    command.downgrade(alembic_config(settings), "0016")
    assert sorted(_redundant_indexes(settings.database_url)) == [
        "attempts.ix_attempts_todo_id('todo_id',)", "deliveries.ix_deliveries_source_id('source_id',)",
        "grants.ix_grants_agent_id('agent_id',)",
        "inbox_items.ix_inbox_items_human_id('human_id',)",
        "project_owners.ix_project_owners_project_id('project_id',)"]
    upgrade(settings)
    assert _redundant_indexes(settings.database_url) == []


def test_sqlite_no_index_repeats_the_leading_columns_of_another(tmp_path: Path) -> None:
    _downgrade_restores_the_indexes(Settings(home=tmp_path))


def test_postgresql_no_index_repeats_the_leading_columns_of_another(postgres_url: str, tmp_path: Path) -> None:
    _downgrade_restores_the_indexes(Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url)))


HOT_INDEXES = {  # every row written to these tables writes each index: each names its reader
    "deliveries": {
        ("source_id", "dedup_key"): "uq_delivery_dedup: the receiver's dedup; reads by source",
        ("source_id", "body_digest"): "uq_delivery_body_digest: replays of timestamp-less schemes",
        ("status", "received_at"): "the sweeper, retention, and the quarantine lists (any project)",
    },
    "feed_events": {
        ("origin_key",): "uq origin_key: one event per origin",
        ("project_id", "id"): "feed reads and the human stream by project",
        ("project_id", "kind", "id"): "the trailer, subscriptions and kind-filtered reads",
    },
    "secret_refs": {},
}


def _hot_indexes(url: str) -> dict[str, dict[tuple[str, ...], str]]:
    engine = sa.create_engine(url)
    found: dict[str, dict[tuple[str, ...], str]] = {}
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            for table, readers in HOT_INDEXES.items():
                indexes = [*inspector.get_indexes(table), *inspector.get_unique_constraints(table)]
                found[table] = {tuple(ix["column_names"]): readers.get(tuple(ix["column_names"]), "no reader")
                                for ix in indexes}
    finally:
        engine.dispose()
    return found


def test_sqlite_hot_tables_keep_only_the_indexes_a_reader_uses(tmp_path: Path) -> None:
    """Issue 11, migration 0024: ``ix_deliveries_project_id`` cost every stored delivery a B-tree
    insert in the writer's transaction (about 1-2 points of the bare route in bench/ingest.py),
    ``ix_feed_kind_id`` every feed event and ``ix_secret_refs_project_id`` every secret ref, and
    no query read them; the downgrade puts them back."""
    from alembic import command

    from switchboard.db import alembic_config

    settings = Settings(home=tmp_path)
    upgrade(settings)
    assert _hot_indexes(settings.database_url) == HOT_INDEXES
    command.downgrade(alembic_config(settings), "0023")
    before = _hot_indexes(settings.database_url)
    assert [(table, columns) for table, found in before.items() for columns, reader in found.items()
            if reader == "no reader"] == [("deliveries", ("project_id",)), ("feed_events", ("kind", "id")),
                                          ("secret_refs", ("project_id",))]
    upgrade(settings)
    assert _hot_indexes(settings.database_url) == HOT_INDEXES


def test_postgresql_hot_tables_keep_only_the_indexes_a_reader_uses(postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url))
    upgrade(settings)
    assert _hot_indexes(settings.database_url) == HOT_INDEXES


def test_sqlite_a_projects_quarantine_list_searches_by_status(tmp_path: Path) -> None:
    """The quarantine list of one project (the web UI's, ``delivery quarantined --project``) is
    the reader ``ix_deliveries_project_id`` would have served: SQLite's plan for the query
    :func:`~switchboard.intake.quarantine.page_quarantined` runs searches the status index (the
    few quarantined rows), not the whole table."""
    from switchboard.db import Database
    from switchboard.intake import quarantine

    settings = Settings(home=tmp_path)
    upgrade(settings)
    db = Database(settings)
    ran: list[tuple[str, object]] = []

    def capture(conn: object, cursor: object, statement: str, parameters: object, *_: object) -> None:
        if "FROM deliveries" in statement:
            ran.append((statement, parameters))

    sa.event.listen(db.read_engine, "before_cursor_execute", capture)
    try:
        with db.read() as s:
            assert quarantine.page_quarantined(s, ["prj_1", "prj_2"], limit=10)["deliveries"] == []
        ((statement, parameters),) = ran
        with db.engine.connect() as conn:
            plan = [row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)]
    finally:
        db.dispose()
    assert "SEARCH deliveries USING INDEX ix_deliveries_status_received_at (status=?)" in plan, plan


_HOLDERS = {  # a row at 0021 holding feed id 41, for each column that holds feed ids
    "feed_events": "INSERT INTO feed_events (id, kind, title, created_at) VALUES (41, 'x', 'x', '2026-12-01')",
    "agent_cursors": "INSERT INTO agent_cursors (agent_id, stream, project_id, position) "
                     "VALUES ('agt_1', 'feed', '', 41)",
    "subscriptions": "INSERT INTO subscriptions (id, kind, agent_id, seed_event_id, created_at) "
                     "VALUES ('sub_1', 'todo.created', 'agt_1', 41, '2026-12-01')",
    "inbox_items.seq": "INSERT INTO inbox_items (id, agent_id, human_id, kind, title, status, on_expiry, seq, "
                       "created_at) VALUES ('inb_1', 'agt_1', 'hum_1', 'question', 'q', 'open', 'expire', 41, "
                       "'2026-12-01')",
    "inbox_items.resolved_event_id": "INSERT INTO inbox_items (id, agent_id, human_id, kind, title, status, "
                                     "on_expiry, seq, resolved_event_id, created_at) VALUES ('inb_1', 'agt_1', "
                                     "'hum_1', 'question', 'q', 'answered', 'expire', 0, 41, '2026-12-01')",
}


@pytest.mark.parametrize("holder", sorted(_HOLDERS))
def test_sqlite_event_ids_keep_counting_past_every_position_after_0022(tmp_path: Path, holder: str) -> None:
    """0022 rebuilds ``feed_events`` and ``agent_events`` with AUTOINCREMENT, keeping their rows,
    and starts the feed's counter above every feed id a row still refers to: here one row holds
    41 (a feed event, or a cursor, a subscription seed or an inbox item ahead of a feed that
    retention had emptied). Agent-event ids are held by no row: the counter starts at the
    largest id kept (7; 9 was given and deleted before, and is given again once). A stream
    resuming after such an id starts afresh instead (``feed.events.ahead``, tested with the
    agent stream)."""
    from alembic import command

    from switchboard.db import alembic_config

    settings = Settings(home=tmp_path)
    command.upgrade(alembic_config(settings), "0021")
    engine = sa.create_engine(settings.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO humans (id, name, created_at) VALUES ('hum_1', 'alice', '2026-12-01')"))
            conn.execute(sa.text("INSERT INTO agents (id, name, human_id, created_at) "
                                 "VALUES ('agt_1', 'a1', 'hum_1', '2026-12-01')"))
            conn.execute(sa.text(_HOLDERS[holder]))
            conn.execute(sa.text("INSERT INTO agent_events (id, agent_id, kind, created_at) "
                                 "VALUES (7, 'agt_1', 'wake', '2026-12-01'), (9, 'agt_1', 'wake', '2026-12-01')"))
            conn.execute(sa.text("DELETE FROM agent_events WHERE id = 9"))
        upgrade(settings)
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT id FROM agent_events")).scalars().all() == [7]
            for table, columns, values in (
                    ("feed_events", "kind, title, created_at", "'x', 'x', '2026-12-04'"),
                    ("agent_events", "agent_id, kind, created_at", "'agt_1', 'wake', '2026-12-04'")):
                conn.execute(sa.text(f"INSERT INTO {table} ({columns}) VALUES ({values})"))
                conn.execute(sa.text(f"DELETE FROM {table} WHERE id = (SELECT max(id) FROM {table})"))
                conn.execute(sa.text(f"INSERT INTO {table} ({columns}) VALUES ({values})"))
            ids = {t: conn.execute(sa.text(f"SELECT max(id) FROM {t}")).scalar()
                   for t in ("feed_events", "agent_events")}
    finally:
        engine.dispose()
    # The feed above 41 (42 given and deleted, then 43); agent events above 7 (8 deleted, then 9).
    assert ids == {"feed_events": 43, "agent_events": 9}
