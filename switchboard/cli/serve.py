"""``switchboard serve|worker|channel``: the long-running processes."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click

from switchboard import __version__
from switchboard.cli.base import clear_errors, fail, load_settings, main
from switchboard.config import Settings
from switchboard.errors import ConfigError

if TYPE_CHECKING:
    from switchboard.hub import Hub


def _redacted_url(url: str) -> str:
    """A database or Redis URL without its password."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


@main.command()
@click.option("--host", default=None, help="Listen address (default SWITCHBOARD_HOST or 127.0.0.1).")
@click.option("--port", default=None, type=click.IntRange(0, 65535), help="Port (default SWITCHBOARD_PORT or 8080).")
def serve(host: str | None, port: int | None) -> None:
    """Run the hub: receiver, MCP at /mcp, agent streams, REST (uvicorn)."""
    import uvicorn

    from switchboard.web.asgi import create_app

    settings = load_settings(served=False)
    changes: dict[str, Any] = {}
    if host is not None:
        changes["host"] = host
    if port is not None:
        changes["port"] = port
    if changes:
        settings = settings.with_overrides(**changes)
    from switchboard.instance import hold_running_lock

    hold_running_lock(settings)  # before it migrates: `migrate --to` waits for none of it (instance.py)
    import errno

    with clear_errors():
        # Bound here and handed to uvicorn (not probed and closed): a port in use is a clear
        # error before the start-up, and with --port 0 the port the system chose is known before
        # the app is built, so its links (web UI, source URLs, MCP snippets) name it (a review).
        from switchboard.web.server_protocol import listening_socket

        try:
            listener = listening_socket(settings.host, settings.port)
        except OSError as exc:
            hint = ""
            if exc.errno == errno.EADDRINUSE:
                hint = " (another process listens there: stop it, or choose --port or SWITCHBOARD_PORT)"
            raise ConfigError([f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}{hint}"]) from None
        if not settings.port:
            settings = settings.with_overrides(port=listener.getsockname()[1])
        app = create_app(settings, settle=True)
        if settings.redis_url:
            import redis

            redis.Redis.from_url(settings.redis_url).ping()

    def banner(served: Settings) -> str:
        host = f"[{served.host}]" if ":" in served.host else served.host
        return (f"switchboard {__version__} on http://{host}:{served.port} "
                f"({'sqlite' if served.is_sqlite else 'postgresql ' + _redacted_url(served.database_url)}, "
                f"{'rq jobs on ' + _redacted_url(served.redis_url) if served.redis_url else _embedded(served)})")

    # X-Forwarded-* are honoured by the app itself, only from SWITCHBOARD_TRUSTED_PROXIES
    # (switchboard.web.forwarded); uvicorn's own handling would trust loopback peers first.
    from switchboard.web.server_protocol import uvicorn_options

    # log_config=None: uvicorn's loggers go through the root handlers and their redaction filter
    # (issue 13 item 6), in both log formats. Access lines are INFO: above that level uvicorn
    # would still build each one's arguments (client address, path) before dropping it (issue 11).
    _record_while_serving(app, settings)
    server = _announcing_server(settings, banner, app.state.hub)(uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level.lower(), lifespan="on",
        proxy_headers=False, log_config=None, access_log=settings.log_level in ("DEBUG", "INFO"),
        **uvicorn_options(settings)))
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:
        pass
    if not server.started:
        raise SystemExit(3)  # uvicorn.run's STARTUP_FAILURE


def _announcing_server(settings: Settings, banner: Callable[[Settings], str], hub: Hub) -> type:
    """uvicorn's ``Server`` printing ``banner(settings)`` ("switchboard ... on http://...") and the
    sources' webhook URLs once it listens, after the start-up (the child processes' warm-up
    included, seconds on a loaded machine). Printed before ``uvicorn.run``, a new user's first
    ``curl -s`` right after the banner was refused and printed nothing (a new-user run).

    Its shutdown first answers the parked ``inbox_wait`` calls (``hub.inbox_waiters.close``):
    uvicorn waits for every request under way, and a long poll held a SIGTERM for up to 60 s,
    past the 30 s a process manager gives (a review; the systemd unit's ``TimeoutStopSec``)."""
    import anyio
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            hub.inbox_waiters.close()
            await super().shutdown(sockets)

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if not self.started or self.should_exit:
                return  # a failed start-up, or a SIGTERM during it: nothing to announce
            _announce(settings, banner(settings))
            try:
                await anyio.to_thread.run_sync(_print_source_urls, settings)  # a database read: not on the loop
            except Exception as exc:  # noqa: BLE001 - a listing for the eye; serving goes on
                _announce(settings, f"  (the sources could not be listed: {exc.__class__.__name__})")

    return AnnouncingServer


def _record_while_serving(app: Any, settings: Settings) -> None:
    """Name the address served in the instance folder from start-up to shutdown, so CLI links
    follow ``--port`` (:func:`switchboard.instance.served_url`). In the app's lifespan: uvicorn
    ends the process by raising SIGTERM again after its shutdown, so code after ``run`` never
    runs on a SIGTERM."""
    from contextlib import asynccontextmanager

    from switchboard.instance import forget_served, record_served

    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(the_app: Any) -> Any:
        async with inner(the_app) as state:
            served = record_served(settings, _local_url(settings))
            try:
                yield state
            finally:
                forget_served(served)

    app.router.lifespan_context = lifespan


def _http_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter("give the hub's base URL with its scheme, e.g. http://127.0.0.1:8080")
    path = parts.path.rstrip("/")
    if path.endswith("/mcp"):
        # The hub's /mcp endpoint is for MCP clients over HTTP; the adapter wants the base URL.
        # A common mix-up: take the base rather than fail every call with a 404.
        base = parts._replace(path=path[: -len("/mcp")], query="", fragment="").geturl()
        click.echo(f"note: --url {value} is the hub's /mcp endpoint; the adapter uses the base URL {base}",
                   err=True)
        return base
    return value


@main.command()
@click.option("--url", required=True, callback=_http_url, help="The hub's base URL, e.g. http://127.0.0.1:8080")
def channel(url: str) -> None:
    """Run the stdio channel adapter for Claude Code (token from SWITCHBOARD_TOKEN)."""
    from switchboard.mcp_server.channel import run_channel

    tok = os.environ.get("SWITCHBOARD_TOKEN", "").strip()
    if not tok:
        # Not an exit: Claude Code would show a failed server and no tools. The adapter serves
        # its tools; each call answers ``unauthenticated`` with this fix (issue 10 item 3).
        click.echo("error unauthenticated: SWITCHBOARD_TOKEN is not set: set it to the agent's token "
                   "(switchboard token vend AGENT) in the env of the server in .mcp.json", err=True)
    run_channel(url, tok, load_settings().log_level)


@main.command()
@click.option("--burst", is_flag=True, help="Process what is queued, then exit.")
def worker(burst: bool) -> None:
    """Run an rq worker for delivery processing (needs SWITCHBOARD_REDIS_URL)."""
    from switchboard.worker import run_worker

    settings = load_settings()
    if not settings.redis_url:
        fail("config_invalid", "`switchboard worker` needs SWITCHBOARD_REDIS_URL; without it, "
             "`serve` processes deliveries itself (in a child process, or a thread with "
             "SWITCHBOARD_PROCESSING=thread)", 2)
    with clear_errors():
        run_worker(settings, burst=burst)


def _embedded(settings: Settings) -> str:
    """How embedded mode processes deliveries, for the start-up line."""
    return "jobs in a child process" if settings.processing == "process" else "jobs in a thread"


def _print_source_urls(settings: Settings) -> None:
    """At ``serve`` start: each source's webhook URL at the address really served (stderr)."""
    from sqlalchemy import select

    from switchboard.db import Database
    from switchboard.models import Project, Source

    db = Database(settings)
    try:
        with db.read() as s:
            rows = s.execute(select(Source, Project.name).join(Project, Project.id == Source.project_id)
                             .where(Source.enabled).order_by(Source.created_at).limit(50)).all()
    finally:
        db.dispose()
    local = _local_url(settings)
    for src, project_name in rows:
        line = f"  {src.provider:<17} {project_name}/{src.queue}: {local}/hooks/{src.id}"
        if settings.public_url != local and os.environ.get("SWITCHBOARD_PUBLIC_URL"):
            line += f"  (public: {settings.public_url}/hooks/{src.id})"
        _announce(settings, line)
    if not rows:
        _announce(settings, "  no sources yet: `switchboard source add --project P --provider github` (the "
                            "project first: `switchboard human add H`, `switchboard project add P --owner H`; "
                            "README, Quick start)")


def _local_url(settings: Settings) -> str:
    """The base URL ``serve`` answers at on this machine (a wildcard host as loopback)."""
    host = settings.host
    local_host = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else
                                                               (f"[{host}]" if ":" in host else host))
    return f"http://{local_host}:{settings.port}"


def _announce(settings: Settings, text: str) -> None:
    """A start-up line of ``serve`` on stderr: plain text, or a JSON log record with
    ``SWITCHBOARD_LOG_FORMAT=json`` (so every stderr line parses), whatever the log level."""
    if settings.log_format != "json":
        click.echo(text, err=True)
        return
    import logging

    log = logging.getLogger("switchboard.serve")
    log.setLevel(logging.INFO)
    log.info(text.strip())
