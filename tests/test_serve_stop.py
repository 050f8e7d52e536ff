"""``serve`` stopped by SIGTERM or Ctrl-C (SIGINT): it exits by SIGTERM as uvicorn does, with
status 0 after a Ctrl-C, and what it acknowledged is in the database (README, "Operations",
Stopping)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx2
import pytest

from tests.conftest import cli, cli_env, cli_github_world, free_port, github_headers, start_serve, stop


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 0)],
                         ids=["sigterm", "ctrl-c"])
def test_serve_stopped_by_a_signal_exits_as_documented_with_what_it_acked_stored(
        tmp_path: Path, sig: signal.Signals, status: int) -> None:
    # A new-user run saw "return code -15" after a SIGTERM and asked whether that was a crash:
    # it is uvicorn re-raising the SIGTERM it caught once the shutdown is done, so a parent (a
    # shell: 143) sees how the process ended; a re-raised SIGINT ends as Python's
    # KeyboardInterrupt, status 0. The README says so; this holds it to that.
    env = cli_env(tmp_path / "home")
    port = free_port()
    source = cli_github_world(env, public_url=f"http://127.0.0.1:{port}")
    serve = start_serve(env, port, tmp_path / "serve.log")
    try:
        body = json.dumps({"action": "opened", "issue": {"number": 1, "title": "stop test"},
                           "sender": {"id": 21031067, "login": "alice"}}).encode()
        acked = httpx2.post(f"{serve.url}/hooks/{source['id']}", content=body,
                            headers=github_headers(body, source["secret"]), timeout=30)
        assert acked.status_code == 202, acked.text
        serve.proc.send_signal(sig)
        assert serve.proc.wait(timeout=30) == status, serve.log()
    finally:
        stop(serve.proc)
    log = serve.log()
    assert "Traceback" not in log, log
    stored = cli(env, "delivery", "list")
    assert acked.json()["delivery_id"] in [d["id"] for d in stored["deliveries"]], stored
