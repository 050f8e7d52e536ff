"""Source secrets sealed with the vault: at rest, in place by migration 0009, re-sealed by rotate (issue 13 item 5)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import alembic_config, upgrade
from switchboard.hub import Hub
from switchboard.intake import vault
from switchboard.sealing.text import PREFIX, key_id_of
from tests.conftest import CASES, LiveApp, World, github_headers, serve_in_thread


def _stored(settings: Settings) -> list[str]:
    engine = sa.create_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(sa.text("select secret from source_secrets"))]
    finally:
        engine.dispose()


def test_a_source_secret_is_stored_sealed_and_verifies(world: World) -> None:
    stored = _stored(world.settings)
    assert stored and all(v.startswith(PREFIX) for v in stored)
    assert world.secret not in "".join(stored)
    body = (CASES / "github" / "issues.opened.json").read_bytes()
    for url, hub in serve_in_thread(world.settings):
        app = LiveApp(url, hub, world)
        assert app.post_hook(body, github_headers(body, world.secret)).status_code == 202
        assert app.post_hook(body, github_headers(body, "wrong")).status_code == 401


def test_migration_0009_seals_clear_secrets_in_place(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "instance")
    settings.home.mkdir(parents=True)
    command.upgrade(alembic_config(settings), "0006")
    engine = sa.create_engine(settings.database_url)
    with engine.begin() as conn:
        conn.execute(sa.text("insert into projects (id, name, created_at) values ('prj_1', 'acme', '2026-01-01')"))
        conn.execute(sa.text("insert into sources (id, project_id, provider, queue, enabled, allow_legacy_sha1, "
                             "created_at) values ('src_1', 'prj_1', 'github', 'default', 1, 0, '2026-01-01')"))
        conn.execute(sa.text("insert into source_secrets (id, source_id, secret, created_at) "
                             "values ('sss_1', 'src_1', 'clear-secret-value', '2026-01-01')"))
    engine.dispose()
    upgrade(settings)
    stored = _stored(settings)
    assert len(stored) == 1 and stored[0].startswith(PREFIX) and "clear-secret-value" not in stored[0]
    hub = Hub(settings, role="cli")
    try:
        with hub.db.read() as s:
            assert admin.source_secrets(s, "src_1", hub.clock.now()) == ["clear-secret-value"]
    finally:
        hub.close()


def test_vault_rotate_reseals_source_secrets_under_the_new_key(world: World) -> None:
    before = {key_id_of(v) for v in _stored(world.settings)}
    hub = Hub(world.settings, role="cli")
    try:
        done = vault.rotate(hub)
        after = {key_id_of(v) for v in _stored(world.settings)}
        assert after == {done.primary} and before.isdisjoint(after)
        with hub.db.read() as s:
            assert admin.source_secrets(s, world.source_id, hub.clock.now()) == [world.secret]
    finally:
        hub.close()
