"""Change-stamp triggers exist at head and fire on every change (SQLite and PostgreSQL).

The receiver's source cache and processing's attribution cache are only as good as these
triggers (migration 0007). A later migration that recreates one of the watched tables (SQLite
``batch_alter_table`` copies the table and drops its triggers) must create them again: this
test fails at head if it did not.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import sqlalchemy as sa

from switchboard.config import Settings
from switchboard.db import migrations_dir, upgrade
from switchboard.models.stamps import DIRECTORY_STAMP, SOURCES_STAMP, read_stamp
from tests.services import fresh_postgres_database


def _watched() -> dict[str, tuple[str, ...]]:
    path = next((migrations_dir() / "versions").glob("0007_*.py"))
    spec = importlib.util.spec_from_file_location("m0007", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.STAMPS


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        settings = Settings(home=tmp_path)
    else:
        settings = Settings(home=tmp_path, database_url=fresh_postgres_database(
            request.getfixturevalue("postgres_url")))
    upgrade(settings)
    return settings.database_url


def test_every_watched_table_bumps_its_stamp_on_insert_update_and_delete(url: str) -> None:
    watched = _watched()
    assert set(watched) == {SOURCES_STAMP, DIRECTORY_STAMP}
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO humans (id, name, created_at) VALUES ('hum_t', 'tess', :now)"),
                         {"now": "2026-12-01 00:00:00"})
            conn.execute(sa.text("INSERT INTO projects (id, name, created_at) VALUES ('prj_t', 'tproj', :now)"),
                         {"now": "2026-12-01 00:00:00"})
            # Rows the measured statements refer to, made before any stamp is read.
            conn.execute(sa.text("INSERT INTO sources (id, project_id, provider, queue, enabled, allow_legacy_sha1, "
                                 "created_at) VALUES ('src_s', 'prj_t', 'github', 'q', true, false, :now)"),
                         {"now": "2026-12-01 00:00:00"})
            conn.execute(sa.text("INSERT INTO agents (id, name, human_id, created_at) "
                                 "VALUES ('agt_g', 'gagent', 'hum_t', :now)"), {"now": "2026-12-01 00:00:00"})
        for stamp, tables in watched.items():
            for table in tables:
                for statement in _statements(table):
                    before = _stamp(engine, stamp)
                    with engine.begin() as conn:
                        conn.execute(sa.text(statement))
                    assert _stamp(engine, stamp) > before, f"{statement!r} does not bump {stamp}"
    finally:
        engine.dispose()


def _stamp(engine: sa.Engine, name: str) -> int:
    with engine.begin() as conn:  # a prepared statement: in a transaction SQLAlchemy knows of
        return read_stamp(conn, name)


def _statements(table: str) -> tuple[str, str, str]:
    """SQL that inserts, updates and deletes one row of ``table`` (in that order)."""
    return {
        "sources": (("INSERT INTO sources (id, project_id, provider, queue, enabled, allow_legacy_sha1, created_at) "
                    "VALUES ('src_t', 'prj_t', 'github', 'q', true, false, '2026-12-01 00:00:00')"),
                    "UPDATE sources SET queue = 'r' WHERE id = 'src_t'", "DELETE FROM sources WHERE id = 'src_t'"),
        "source_secrets": (
            ("INSERT INTO source_secrets (id, source_id, secret, created_at) "
            "VALUES ('sss_t', 'src_s', 'x', '2026-12-01 00:00:00')"),
            "UPDATE source_secrets SET secret = 'y' WHERE id = 'sss_t'",
            "DELETE FROM source_secrets WHERE id = 'sss_t'"),
        "identities": (("INSERT INTO identities (id, human_id, provider, workspace, external_id, created_at) "
                       "VALUES ('idn_t', 'hum_t', 'github', '', '1', '2026-12-01 00:00:00')"),
                       "UPDATE identities SET external_id = '2' WHERE id = 'idn_t'",
                       "DELETE FROM identities WHERE id = 'idn_t'"),
        "project_owners": (("INSERT INTO project_owners (id, project_id, human_id, created_at) "
                           "VALUES ('own_t', 'prj_t', 'hum_t', '2026-12-01 00:00:00')"),
                           "UPDATE project_owners SET human_id = 'hum_t' WHERE id = 'own_t'",
                           "DELETE FROM project_owners WHERE id = 'own_t'"),
        "agents": (("INSERT INTO agents (id, name, human_id, created_at) "
                   "VALUES ('agt_t', 'tagent', 'hum_t', '2026-12-01 00:00:00')"),
                   "UPDATE agents SET name = 'tagent2' WHERE id = 'agt_t'", "DELETE FROM agents WHERE id = 'agt_t'"),
        "grants": (("INSERT INTO grants (id, agent_id, project_id, role, created_at) "
                   "VALUES ('grt_t', 'agt_g', 'prj_t', 'work', '2026-12-01 00:00:00')"),
                   "UPDATE grants SET role = 'read' WHERE id = 'grt_t'", "DELETE FROM grants WHERE id = 'grt_t'"),
        "projects": ("INSERT INTO projects (id, name, created_at) VALUES ('prj_u', 'uproj', '2026-12-01 00:00:00')",
                     "UPDATE projects SET name = 'uproj2' WHERE id = 'prj_u'",
                     "DELETE FROM projects WHERE id = 'prj_u'"),
    }[table]
