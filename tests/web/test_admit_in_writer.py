"""The body's admit in the delivery writer (issue 11): for adapters whose answer never depends on
the payload (``admits_in_writer``), the strict parse and the body digest run in the writer's
thread or process before its transaction, not on the event loop, with the answers the
receiver gave when it admitted them itself (DESIGN.md §6.1: 400 ``malformed_payload`` recorded
and never acknowledged, 400 ``malformed_request`` with nothing stored, replay dedup on the
digest)."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import sqlalchemy as sa
from sqlalchemy import func, select

from switchboard.models import Delivery, Todo
from switchboard.sources import adapter_for
from switchboard.sources.base import BaseSource
from switchboard.sources.github import GitHubSource
from switchboard.web.ingest import MALFORMED, REFUSED, admit_row
from tests.conftest import CASES, LiveApp, World, github_headers, serve_in_thread, wait_for

ISSUE = (CASES / "github" / "issues.opened.json").read_bytes()
PROVIDERS = ("discord", "gitea", "github", "gitlab", "mattermost", "slack", "standard_webhooks", "teams",
             "telegram")


@pytest.fixture(params=["thread", "process"])
def served(request: pytest.FixtureRequest, world: World) -> Iterator[LiveApp]:
    """The instance served over real HTTP with each delivery writer."""
    for url, hub in serve_in_thread(world.settings.with_overrides(delivery_writer=request.param)):
        yield LiveApp(url, hub, world)


def _rows(live: LiveApp) -> list[Delivery]:
    with live.hub.db.read() as s:
        return list(s.execute(select(Delivery).order_by(Delivery.received_at)).scalars())


def test_adapters_whose_answer_depends_on_the_payload_admit_on_the_loop() -> None:
    on_loop = {p for p in PROVIDERS if not adapter_for(p).admits_in_writer}
    assert on_loop == {"slack", "discord", "teams"}  # handshakes (Slack, Discord), reply bodies
    for provider in set(PROVIDERS) - on_loop:
        # An adapter admitted in the writer answers a plain 202: the receiver never sees its envelope.
        assert type(adapter_for(provider)).accept_reply is BaseSource.accept_reply, provider


def test_a_good_body_is_stored_with_its_event_and_digest_and_a_replay_is_a_duplicate(served: LiveApp) -> None:
    first = served.post_hook(ISSUE, github_headers(ISSUE, served.world.secret))
    assert first.status_code == 202, first.text
    (row,) = _rows(served)
    assert row.event == "issues.opened"
    assert row.body_digest == hashlib.sha256(ISSUE).hexdigest()
    # The same bytes under a fresh delivery id (a captured body replayed, issue 12 #7): the
    # digest the writer took makes it a duplicate of the first.
    again = served.post_hook(ISSUE, github_headers(ISSUE, served.world.secret))
    assert again.status_code == 200 and again.json() == {"delivery_id": first.json()["delivery_id"],
                                                         "duplicate": True}
    processed = wait_for(lambda: (r := _rows(served)[0]).status == "processed" and r)
    assert processed.todo_id is not None


def test_a_malformed_body_is_recorded_refused_again_and_never_processed(served: LiveApp) -> None:
    bad = b'{"action": "opened", "issue": {1: 2}}'
    for attempt in range(2):
        resp = served.post_hook(bad, github_headers(bad, served.world.secret, delivery="same-bad"))
        assert resp.status_code == 400 and resp.json()["code"] == "malformed_payload", (attempt, resp.text)
        assert "not JSON we accept" in resp.json()["detail"]
    undecodable = b'{"x":"\xff"}'
    resp = served.post_hook(undecodable, github_headers(undecodable, served.world.secret))
    assert resp.status_code == 400 and resp.json()["detail"] == "body is not valid UTF-8"
    rows = _rows(served)
    assert [r.status for r in rows] == ["failed"] * 3
    assert all(r.raw_body is None and r.dedup_key is None and r.body_digest is None for r in rows)
    assert {r.error_code for r in rows} == {"malformed_payload"}
    # Refused before the ack, so never handed to processing: no todo, and still failed after a
    # good delivery has gone all the way through.
    good = served.post_hook(ISSUE, github_headers(ISSUE, served.world.secret))
    assert good.status_code == 202
    wait_for(lambda: any(r.status == "processed" for r in _rows(served)))
    with served.hub.db.read() as s:
        assert s.execute(select(func.count()).select_from(Todo)).scalar_one() == 1
    assert [r.status for r in _rows(served)][:3] == ["failed"] * 3


def test_a_header_the_adapter_refuses_is_400_and_nothing_is_stored(served: LiveApp) -> None:
    headers = github_headers(ISSUE, served.world.secret, event="Not An Event")
    resp = served.post_hook(ISSUE, headers)
    assert resp.status_code == 400 and resp.json()["code"] == "malformed_request", resp.text
    assert "X-GitHub-Event" in resp.json()["detail"]
    assert _rows(served) == []


def test_a_refused_header_for_a_source_disabled_since_verification_is_answered_as_it_is_now(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's admit refuses a header before its transaction reads the sources' stamp, so a
    source disabled between the receiver's verification and that admit answered 400 for a source
    that is gone (a review). A refused header now goes through the transaction's stamp check
    like every row (STALE, so the receiver verifies again): 404, as for any request after the
    disable; and an unchanged source still answers 400 with the adapter's message."""
    real = GitHubSource.admit
    path = sa.engine.make_url(world.settings.database_url).database
    disable = {"now": False}

    def admit(self: GitHubSource, body: bytes, headers: Any) -> Any:
        if disable["now"]:  # in the writer thread, between verification and the writer's transaction
            with sqlite3.connect(path) as conn:
                conn.execute("UPDATE sources SET enabled = 0 WHERE id = ?", (world.source_id,))
        return real(self, body, headers)

    monkeypatch.setattr(GitHubSource, "admit", admit)
    for url, _ in serve_in_thread(world.settings.with_overrides(delivery_writer="thread")):
        bad = github_headers(ISSUE, world.secret, event="Not An Event")
        resp = httpx2.post(f"{url}/hooks/{world.source_id}", content=ISSUE, headers=bad, timeout=30)
        assert resp.status_code == 400 and resp.json()["code"] == "malformed_request", resp.text
        disable["now"] = True
        resp = httpx2.post(f"{url}/hooks/{world.source_id}", content=ISSUE, timeout=30,
                           headers=github_headers(ISSUE, world.secret, event="Not An Event"))
        assert resp.status_code == 404, resp.text


def test_the_event_loop_never_parses_the_body_with_the_writer_process(world: World,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With the writer process, the serving process never runs the adapter's admit or digest:
    here they fail in ``serve``'s process (the child, spawned, has its own), and the delivery is
    still stored and acknowledged."""

    def refuse(*_: Any) -> Any:
        raise AssertionError("admitted on the event loop")

    monkeypatch.setattr(GitHubSource, "admit", refuse)
    monkeypatch.setattr(GitHubSource, "body_digest", refuse)
    for url, hub in serve_in_thread(world.settings.with_overrides(delivery_writer="process")):
        resp = httpx2.post(f"{url}/hooks/{world.source_id}", content=ISSUE, timeout=30,
                           headers=github_headers(ISSUE, world.secret))
        assert resp.status_code == 202, resp.text
        with hub.db.read() as s:
            row = s.get(Delivery, resp.json()["delivery_id"])
            assert row is not None and row.event == "issues.opened"
            assert row.body_digest == hashlib.sha256(ISSUE).hexdigest()


def test_with_the_writer_thread_the_body_is_admitted_in_that_thread(world: World,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = GitHubSource.admit

    def admit(self: GitHubSource, body: bytes, headers: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(self, body, headers)

    monkeypatch.setattr(GitHubSource, "admit", admit)
    for url, _ in serve_in_thread(world.settings.with_overrides(delivery_writer="thread")):
        resp = httpx2.post(f"{url}/hooks/{world.source_id}", content=ISSUE, timeout=30,
                           headers=github_headers(ISSUE, world.secret))
        assert resp.status_code == 202, resp.text
    assert threads == ["switchboard-delivery-writer"]  # processing parses with parse(), not admit()


def test_admit_row_leaves_the_receivers_row_unchanged() -> None:
    # The receiver sends the same row again after a STALE outcome: the writer works on a copy.
    row: dict[str, Any] = {"id": "dlv_x", "raw_body": b'{"a": 1, "a": 2}', "event": None, "body_digest": None,
                           "dedup_key": "k", "status": "received", "error_code": None, "error_detail": None,
                           "headers": {"x-github-event": "issues", "x-github-delivery": "d"}}
    before = dict(row)
    written, outcome = admit_row(row, "github")
    malformed = written["error_detail"]  # the (MALFORMED, message) the writer answers
    assert row == before and outcome is None and malformed is not None and "duplicate key" in malformed
    assert written["status"] == "failed" and written["raw_body"] is None and written["dedup_key"] is None
    assert admit_row(row, None) == (row, None)
    refused = {**row, "headers": {"x-github-event": "issues"}}
    assert admit_row(refused, "github")[1] == (REFUSED, ("X-GitHub-Delivery is required (GitHub's delivery GUID, "
                                                         "at most 200 characters)"))
    assert MALFORMED != REFUSED
