"""Review of embedded mode's processing process (issue 11): a real ``switchboard serve``, its real
child, and a real failure of the restart (``EMFILE`` while the serving process is out of file
descriptors, as under a burst of connections). Processing must come back when the cause is gone:
every acknowledged delivery is processed, not left ``received`` until someone restarts ``serve``."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
from pathlib import Path

import httpx2

from tests.conftest import (
    CASES,
    cli_env,
    cli_github_world,
    free_port,
    github_headers,
    start_serve,
    stop,
    wait_for,
)


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live children of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append((int(entry), cmdline))
    return out


def _processing_child(pid: int) -> int:
    found = [p for p, cmd in _children(pid) if "spawn_main" in cmd]
    assert len(found) == 1, _children(pid)
    return found[0]


def _status(db: Path, delivery_id: str) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("select status from deliveries where id = ?", (delivery_id,)).fetchone()[0])


def test_processing_comes_back_after_a_restart_that_failed_once(tmp_path: Path) -> None:
    home = tmp_path / "instance"
    # No SWITCHBOARD_PROCESSING: the child process, as `serve` runs by default. The delivery
    # writer in a thread, so the processing child is serve's only spawned child (the writer
    # process has the same command line; tests/web/test_writer_child.py kills that one).
    env = cli_env(home, SWITCHBOARD_DELIVERY_WRITER="thread")
    port = free_port()
    source = cli_github_world(env, public_url=f"http://127.0.0.1:{port}")
    server = start_serve(env, port, tmp_path / "serve.log")  # listening: the child is ready
    try:
        child = _processing_child(server.proc.pid)
        # The serving process runs out of descriptors for a moment; the child dies meanwhile.
        limits = resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (3, limits[1]))
        try:
            os.kill(child, signal.SIGKILL)
            wait_for(lambda: "could not start the processing process" in server.log(), timeout=20)
        finally:
            resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, limits)
        # The cause is gone: a delivery acknowledged now must be processed.
        body = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
        raw = json.dumps(body).encode()
        resp = httpx2.post(source["url"], content=raw, timeout=10,
                           headers=github_headers(raw, source["secret"], delivery="after-emfile"))
        assert resp.status_code == 202, resp.text
        delivery_id = resp.json()["delivery_id"]
        db = home / "switchboard.db"
        try:
            wait_for(lambda: _status(db, delivery_id) == "processed", timeout=30, interval=0.5)
        except AssertionError:
            raise AssertionError(
                f"acknowledged delivery still {_status(db, delivery_id)!r} 30 s later; serve's children: "
                f"{_children(server.proc.pid)}\n{server.log()[-1500:]}") from None
    finally:
        stop(server.proc)
