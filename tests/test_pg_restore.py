"""A PostgreSQL backup restored into another cluster, as README "Backup and restore" says
(``pg_dump``, ``pg_restore``, ``switchboard migrate``): the feed goes on where it was; and
``migrate --to`` asking for a ``pg_dump`` before it moves the schema down.

Feed and agent event ids are made from transaction ids (migration 0014). A cluster that has
run longer than the one restored into holds ids ahead of every new one: without the offset of
migration 0023 (raised by ``migrate``), new events went below every cursor kept in the dump.
Real tools, a real second cluster (``tests.services.running_postgres``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.feed import events as feed
from switchboard.feed import pages
from switchboard.hub import Hub
from switchboard.schema import head_revision
from tests.conftest import cli, cli_env, switchboard_exe
from tests.services import _libpq_url, _postgres_bindir, fresh_postgres_database, running_postgres


def _read_titles(hub: Hub, agent_id: str) -> list[str]:
    """``feed_read`` with the agent's stored cursor, as an agent polling its feed would."""
    with hub.db.write() as s:
        return [e["title"] for e in pages.read(s, agent_id, admin.grants_of(s, agent_id))["events"]]


def _append(hub: Hub, project_id: str, title: str) -> int:
    with hub.db.write() as s:
        return int(feed.append(s, hub.clock, project_id, "todo.created", title).id or 0)


def test_a_dump_restored_into_a_new_cluster_goes_on_counting(postgres_url: str, tmp_path: Path) -> None:
    bindir = _postgres_bindir()
    assert bindir is not None
    old = Settings(home=tmp_path / "old", database_url=fresh_postgres_database(postgres_url))
    upgrade(old)
    with psycopg.connect(_libpq_url(old.database_url), autocommit=True) as conn:
        # An older cluster: a few thousand transactions ahead of a new one after its restore.
        conn.execute("DO $$ BEGIN FOR i IN 1..5000 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$")
    hub = Hub(old, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            project_id = admin.add_project(s, "acme").id
            agent_id = admin.add_agent(s, "a1", "alice").id
            admin.grant(s, "a1", "acme", "work")
        before = _append(hub, project_id, "before the backup")
        assert _read_titles(hub, agent_id) == ["before the backup"]  # the cursor stands on it
    finally:
        hub.close()
    dump = tmp_path / "backup.dump"
    subprocess.run([str(bindir / "pg_dump"), "--format=custom", "--file", str(dump), _libpq_url(old.database_url)],
                   check=True, capture_output=True, timeout=120)

    with running_postgres() as new_server:
        restored_url = fresh_postgres_database(new_server)
        subprocess.run([str(bindir / "pg_restore"), "--clean", "--if-exists", "--dbname",
                        _libpq_url(restored_url), str(dump)], check=True, capture_output=True, timeout=120)
        home = tmp_path / "new"
        cli(cli_env(home, SWITCHBOARD_DATABASE_URL=restored_url), "migrate")
        restored = Hub(Settings(home=home, database_url=restored_url), role="cli")
        try:
            assert _read_titles(restored, agent_id) == []  # the cursor came back with the dump
            after = _append(restored, project_id, "after the restore")
            assert after > before
            assert _read_titles(restored, agent_id) == ["after the restore"]
        finally:
            restored.close()


def test_moving_a_postgresql_schema_down_asks_for_a_pg_dump_first(postgres_url: str, tmp_path: Path) -> None:
    """`migrate --to` on PostgreSQL: no copy can be made beside the database, so moving down is
    refused with the `pg_dump` command to run first (password left out), then done with --yes."""
    url = fresh_postgres_database(postgres_url)
    env = cli_env(tmp_path / "home", SWITCHBOARD_DATABASE_URL=url)
    cli(env, "migrate")
    head = head_revision()
    proc = subprocess.run([switchboard_exe(), "migrate", "--to", "0023", "--json"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "confirmation_required", err
    assert err["message"].startswith(f"moving the schema down from {head} to 0023 undoes 1 migration, whose "
                                     "downgrades drop what each added (tables and columns, with their data). "
                                     "Back the database up first (pg_dump --format=custom --file "
                                     f"'{tmp_path / 'home'}/switchboard-at-{head}.dump' 'postgresql://"), err
    assert err["message"].endswith("'), then run again with --yes"), err
    with psycopg.connect(_libpq_url(url)) as conn:
        assert conn.execute("select version_num from alembic_version").fetchone() == (head,)
    assert cli(env, "migrate", "--to", "0023", "--yes") == {"before": head, "revision": "0023", "copy": None}
    with psycopg.connect(_libpq_url(url)) as conn:
        assert conn.execute("select version_num from alembic_version").fetchone() == ("0023",)
