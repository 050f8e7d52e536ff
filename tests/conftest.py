"""Shared fixtures: a configured instance, a live server (in-process or as a real process)."""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub

pytest_plugins = ["tests.services"]

CASES = Path(__file__).resolve().parent / "fixtures" / "cases"  # copies of ../shared/cases
GITHUB_SENDER_ID = "21031067"  # sender.id in ../shared/cases/github/*.json (Codertocat)
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def github_headers(body: bytes, secret: str, event: str = "issues", delivery: str | None = None,
                   hook_id: str = "1", content_type: str = "application/json") -> dict[str, str]:
    """Headers GitHub sends, signed with ``secret`` over ``body``."""
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-GitHub-Hook-ID": hook_id,
        "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "Content-Type": content_type,
        "User-Agent": "GitHub-Hookshot/abc123",
    }


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


@dataclass
class World:
    """A configured instance: one project, one GitHub source, one human with an agent."""

    settings: Settings
    source_id: str
    secret: str
    token: str
    agent_id: str
    project_id: str


_TEMPLATES: dict[tuple[str, str | None], tuple[Path, World | None]] = {}


def _fresh_sqlite(settings: Settings) -> bool:
    """An instance whose SQLite file and key ring live in an empty (or absent) home of its own."""
    home = Path(settings.home)
    return (
        settings.database_url == Settings(home=home).database_url
        and settings.vault_keys is None
        and not (home.exists() and any(home.iterdir()))
    )


def _from_template(settings: Settings, key: tuple[str, str | None], build: Any) -> World | None:
    """Copy the per-process template instance made by ``build(settings)`` into ``settings.home``.

    Running the migrations and the admin writes once per process instead of once per test
    saves ~0.5 s a test (issue 17: mutation testing runs the same tests hundreds of times, each
    run in a process forked from one that made the templates already). The copy is a fresh
    instance like any other: its own folder, database file and key ring; only the ids and the
    token repeat across tests. Templates live until the process that made them exits.
    """
    if key not in _TEMPLATES:
        parent = Path(tempfile.mkdtemp(prefix="switchboard-template-"))
        atexit.register(_drop_template, parent, os.getpid())
        folder = parent / "instance"
        _TEMPLATES[key] = (folder, build(Settings(home=folder)))
    folder, made = _TEMPLATES[key]
    shutil.copytree(folder, settings.home, dirs_exist_ok=True)
    return dataclasses.replace(made, settings=settings) if made is not None else None


def _drop_template(parent: Path, owner: int) -> None:
    """At exit, remove a template folder made by this process (not one a fork inherited)."""
    if os.getpid() == owner:
        shutil.rmtree(parent, ignore_errors=True)


def migrate(settings: Settings) -> None:
    """``upgrade(settings)``; a fresh SQLite instance is copied from a migrated template."""
    if _fresh_sqlite(settings):
        _from_template(settings, ("migrated", None), upgrade)
    else:
        upgrade(settings)


def store_github_delivery(hub: Hub, world: World, body: bytes, event: str = "issues",
                          content_type: str = "application/json") -> str:
    """Store a GitHub delivery to ``world``'s source as the receiver would have (status
    ``received``, not processed yet) and return its id."""
    from switchboard.models import Delivery

    delivery = Delivery(source_id=world.source_id, project_id=world.project_id,
                        headers={"x-github-event": event, "content-type": content_type,
                                 "x-github-delivery": "d-1"}, raw_body=body)
    with hub.db.write() as s:
        s.add(delivery)
    return delivery.id


def configure(settings: Settings, secret: str = "It's a Secret to Everybody") -> World:
    """Migrate and create alice (GitHub 21031067), project acme, a GitHub source, agent claude1.

    A fresh SQLite instance is copied from a template configured once per process.
    """
    if _fresh_sqlite(settings):
        world = _from_template(settings, ("configured", secret), lambda s: _configure(s, secret))
        assert world is not None
        return world
    return _configure(settings, secret)


def _configure(settings: Settings, secret: str) -> World:
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            admin.link_identity(s, "alice", "github", GITHUB_SENDER_ID, login="Codertocat")
            project = admin.add_project(s, "acme")
            source, secret = admin.add_source(s, "acme", "github", secret, queue="reviews")
            agent = admin.add_agent(s, "claude1", "alice")
            admin.grant(s, "claude1", "acme", "work")
            token = admin.vend_token(s, "claude1")
        return World(settings, source.id, secret, token, agent.id, project.id)
    finally:
        hub.close()


@dataclass
class LiveApp:
    """An app served by uvicorn in a thread on a free port, with its hub for inspection."""

    url: str
    hub: Hub
    world: World

    def post_hook(self, body: bytes, headers: dict[str, str], source_id: str | None = None) -> httpx2.Response:
        return httpx2.post(f"{self.url}/hooks/{source_id or self.world.source_id}", content=body, headers=headers,
                           timeout=30)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings for a fresh SQLite instance in a temporary folder."""
    return Settings(home=tmp_path / "instance", sweep_interval_seconds=0.5, sweep_grace_seconds=1.0)


@pytest.fixture
def recheck_after_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """``inbox_wait`` re-reads the ledger after 60 s instead of 2 s: a wait that returns within
    seconds was woken by the answer, not found by the re-check, with a margin a loaded CI machine
    cannot eat."""
    from switchboard.inbox import waiting

    monkeypatch.setattr(waiting, "RECHECK_SECONDS", 60.0)


@pytest.fixture
def world(settings: Settings) -> World:
    """A configured fresh instance."""
    return configure(settings)


def read_response(stream: Any) -> tuple[bytes, bytes]:
    """One HTTP/1.1 response with a ``content-length`` from ``sock.makefile("rb")``: ``(head,
    body)``, reading no byte past it (a pipelined response can arrive in the same segment)."""
    lines = []
    while (line := stream.readline()) not in (b"\r\n", b""):
        lines.append(line.rstrip(b"\r\n"))
    length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:"))
    body = stream.read(length)
    assert len(body) == length, lines
    return b"\r\n".join(lines), body


def serve_in_thread(settings: Settings) -> Iterator[tuple[str, Hub]]:
    """Run ``create_app(settings)`` under uvicorn in a thread, on a listening socket made as
    ``switchboard serve`` makes it (``server_protocol.listening_socket``, port 0); yield
    ``(url, hub)``."""
    from switchboard.web.asgi import create_app
    from switchboard.web.server_protocol import listening_socket, uvicorn_options

    listener = listening_socket("127.0.0.1", 0)
    port = listener.getsockname()[1]
    settings = settings.with_overrides(port=port)
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           **uvicorn_options(settings)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=20)
        yield f"http://127.0.0.1:{port}", app.state.hub
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


@pytest.fixture
def live(world: World) -> Iterator[LiveApp]:
    """The configured instance served in-process over real HTTP."""
    for url, hub in serve_in_thread(world.settings):
        yield LiveApp(url, hub, world)


@dataclass
class ServeProcess:
    """``switchboard serve`` as a real process."""

    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """Environment for running ``switchboard`` against ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_HOME"] = str(home)
    env.update(extra)
    return env


def switchboard_exe() -> str:
    """The ``switchboard`` console script of this interpreter's environment."""
    candidate = Path(sys.executable).with_name("switchboard")
    return str(candidate) if candidate.exists() else "switchboard"


def cli(env: dict[str, str], *args: str) -> Any:
    """Run ``switchboard <args> --json`` and return its parsed output (fails on a non-zero exit)."""
    proc = subprocess.run([switchboard_exe(), *args, "--json"], env=env, capture_output=True, text=True, check=False,
                          timeout=60)
    assert proc.returncode == 0, f"switchboard {' '.join(args)} failed: {proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)


def cli_github_world(env: dict[str, str], public_url: str | None = None, owner: str | None = "alice") -> Any:
    """Through the CLI: ``init``, alice (GitHub user 21031067), project acme (owned by ``owner``)
    and a GitHub source on it (printed with ``public_url`` when given). Returns ``source add``'s
    output (``id``, ``secret``, ``url``)."""
    cli(env, "init")
    cli(env, "human", "add", "alice")
    cli(env, "identity", "link", "--human", "alice", "--provider", "github", "--external-id", "21031067")
    cli(env, "project", "add", "acme", *(("--owner", owner) if owner else ()))
    source_env = env | {"SWITCHBOARD_PUBLIC_URL": public_url} if public_url else env
    return cli(source_env, "source", "add", "--project", "acme", "--provider", "github")


def start_serve(env: dict[str, str], port: int, log_path: Path) -> ServeProcess:
    """Start ``switchboard serve`` and wait until it answers health checks."""
    log_file = log_path.open("ab")
    proc = subprocess.Popen([switchboard_exe(), "serve", "--port", str(port)], env=env, stdout=log_file,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early:\n{log_path.read_text()}")
        try:
            return httpx2.get(f"{url}/api/v1/health", timeout=1).status_code == 200
        except httpx2.HTTPError:
            return False

    # A serve that exits is reported at once; a slow start on a loaded CI machine once took
    # over 30 s (three xdist workers and other serves on two cores).
    wait_for(healthy, timeout=90, interval=0.1)
    return ServeProcess(url, proc, log_path)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a process and wait for it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def case_bytes(*parts: str) -> bytes:
    """The bytes of a file under ``../shared/cases``; skip when the folder is absent."""
    path = CASES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared case file {path} not present")
    return path.read_bytes()


@pytest.fixture
def multi(settings: Settings) -> Iterator[Any]:
    """A live app with a source per provider, alice linked on each (``tests/web/multi.py``)."""
    from tests.web.multi import serve_all

    yield from serve_all(settings)
