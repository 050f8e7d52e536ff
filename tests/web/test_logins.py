"""Login links and web sessions (``switchboard.web.logins``): single use, expiry, logout."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from switchboard.clock import FixedClock
from switchboard.config import Settings
from switchboard.errors import NotFound, Unauthenticated
from switchboard.hub import Hub
from switchboard.web import logins
from tests.conftest import World, cli, cli_env, configure
from tests.services import fresh_postgres_database


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Hub:
    """alice's world on SQLite and on PostgreSQL, with a clock that moves only when told."""
    if request.param == "sqlite":
        settings = Settings(home=tmp_path / "instance")
    else:
        url = request.getfixturevalue("postgres_url")
        settings = Settings(home=tmp_path / "instance", database_url=fresh_postgres_database(url))
    configure(settings)
    hub = Hub(settings, clock=FixedClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC)), role="cli")
    yield hub
    hub.close()


def _link(hub: Hub, name: str = "alice") -> str:
    with hub.db.write() as s:
        return logins.create_link(s, hub.clock, name)


def _redeem(hub: Hub, token: str) -> str:
    with hub.db.write() as s:
        return logins.redeem(s, hub.clock, token)[0]


def test_a_link_expires_after_ten_minutes(hub: Hub) -> None:
    token = _link(hub)
    hub.clock.at += timedelta(seconds=logins.LOGIN_LINK_SECONDS)  # type: ignore[attr-defined]
    with pytest.raises(Unauthenticated):
        _redeem(hub, token)
    fresh = _link(hub)
    hub.clock.at += timedelta(seconds=logins.LOGIN_LINK_SECONDS - 1)  # type: ignore[attr-defined]
    assert _redeem(hub, fresh).startswith("sbw_")


def test_a_link_works_once_even_when_two_redeem_at_once(hub: Hub) -> None:
    token = _link(hub)
    results: list[str] = []
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait()
        try:
            results.append(_redeem(hub, token))
        except Unauthenticated:
            results.append("refused")

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(r == "refused" for r in results) == [False, True, True, True]


@pytest.mark.parametrize("token", [None, "", "sbl_", "sbl_unknown", "sbk_" + "a" * 43, "x" * 500, 42])
def test_bad_links_are_one_unauthenticated(hub: Hub, token: object) -> None:
    with pytest.raises(Unauthenticated, match="unknown, used or expired"):
        _redeem(hub, token)  # type: ignore[arg-type]


def test_sessions_expire_and_logout_ends_them(hub: Hub) -> None:
    session_token = _redeem(hub, _link(hub))
    with hub.db.read() as s:
        assert logins.authenticate(s, hub.clock, session_token).name == "alice"
    hub.clock.at += timedelta(seconds=logins.SESSION_SECONDS)  # type: ignore[attr-defined]
    with hub.db.read() as s, pytest.raises(Unauthenticated):
        logins.authenticate(s, hub.clock, session_token)
    other = _redeem(hub, _link(hub))
    with hub.db.write() as s:
        logins.end(s, hub.clock, other)
    with hub.db.read() as s, pytest.raises(Unauthenticated):
        logins.authenticate(s, hub.clock, other)
    with hub.db.read() as s, pytest.raises(Unauthenticated):
        logins.authenticate(s, hub.clock, "sbl_" + other[4:])  # a link-shaped token is no session


def test_unknown_human_gets_no_link(hub: Hub) -> None:
    with hub.db.write() as s, pytest.raises(NotFound):
        logins.create_link(s, hub.clock, "mallory")


def test_cli_prints_a_link_under_the_public_url(world: World) -> None:
    env = cli_env(world.settings.home, SWITCHBOARD_PUBLIC_URL="https://hub.example.com")
    out = cli(env, "login", "alice")
    assert out["url"].startswith("https://hub.example.com/ui/login/sbl_")
    assert out["expires_in_seconds"] == 600


def test_the_cookie_is_secure_when_the_public_url_is_https(world: World) -> None:
    from switchboard.web.flask_app import create_flask_app

    hub = Hub(world.settings.with_overrides(public_url="https://hub.example.com"), role="cli")
    try:
        app = create_flask_app(hub)
        with hub.db.write() as s:
            token = logins.create_link(s, hub.clock, "alice")
        client = app.test_client()
        page = client.get(f"/ui/login/{token}", base_url="https://hub.example.com")
        csrf = page.get_data(as_text=True).split('name="csrf_token" value="')[1].split('"')[0]
        done = client.post(f"/ui/login/{token}", data={"csrf_token": csrf}, base_url="https://hub.example.com",
                           headers={"Referer": "https://hub.example.com/ui/login"})
        assert done.status_code == 303
        cookie = done.headers["Set-Cookie"]
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    finally:
        hub.close()
