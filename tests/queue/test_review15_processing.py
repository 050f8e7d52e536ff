"""Review 15 of 96cbe4b (processing reads its deliveries and sources before the write transaction).

What ``_prepare`` reads in its own read session can change before the write transaction
checks ``still_received``: these tests run a concurrent change in that gap (by wrapping
``_prepare``) and compare with what processing did when it loaded the rows in the write
transaction."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from switchboard import admin
from switchboard.hub import Hub
from switchboard.intake import quarantine
from switchboard.models import Delivery, Todo
from switchboard.queue import jobs
from switchboard.queue.jobs import process_delivery
from tests.conftest import CASES, World, configure
from tests.queue.conftest import NOW, TickingClock, settings_for

ISSUE = json.loads((CASES / "github" / "issues.opened.json").read_bytes())


@pytest.fixture(params=["sqlite", "postgresql"])
def wh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[World, Hub]]:
    settings = settings_for(request, tmp_path, request.param)
    world = configure(settings)
    hub = Hub(settings, clock=TickingClock(NOW), role="cli")
    try:
        yield world, hub
    finally:
        hub.close()


def _store(hub: Hub, world: World, payload: dict[str, Any]) -> str:
    delivery = Delivery(source_id=world.source_id, project_id=world.project_id,
                        headers={"x-github-event": "issues", "content-type": "application/json",
                                 "x-github-delivery": "d-1"},
                        raw_body=json.dumps(payload).encode())
    with hub.db.write() as s:
        s.add(delivery)
    return delivery.id


def _between_prepare_and_write(monkeypatch: pytest.MonkeyPatch, action: Any) -> None:
    """Run ``action()`` once, after the first ``_prepare`` returns and before its write transaction
    (a concurrent writer: another processor, an admin, a release)."""
    original = jobs._prepare
    state = {"done": False}

    def prepare(hub: Hub, delivery_ids: list[str]) -> Any:
        out = original(hub, delivery_ids)
        if not state["done"]:
            state["done"] = True
            action()
        return out

    monkeypatch.setattr(jobs, "_prepare", prepare)


def test_a_trust_revoked_before_the_write_transaction_is_not_cached_as_trusted(
        wh: tuple[World, Hub], monkeypatch: pytest.MonkeyPatch) -> None:
    """The source (its trust list) is read before the write transaction, but the directory
    cache is keyed on the stamp read in it: an attribution computed from the stale trust list is
    remembered under the new stamp, and every later delivery from that sender is trusted until
    the next directory change (the revocation is lost)."""
    world, hub = wh
    with hub.db.write() as s:
        admin.set_trusted(s, world.source_id, "alice", True)  # explicit list: [alice]
    first = _store(hub, world, ISSUE)

    def revoke() -> None:
        with hub.db.write() as s:
            admin.set_trusted(s, world.source_id, "alice", False)  # []: bumps the directory stamp

    _between_prepare_and_write(monkeypatch, revoke)
    process_delivery(hub, first)  # the race itself: either outcome is defensible for this one
    second = _store(hub, world, {**ISSUE, "action": "opened", "issue": {**ISSUE["issue"], "title": "again"}})
    assert process_delivery(hub, second) == "quarantined"  # alice is not trusted any more


def test_a_delivery_released_while_its_batch_was_prepared_is_processed_as_released(
        wh: tuple[World, Hub], monkeypatch: pytest.MonkeyPatch) -> None:
    """``released_by`` is read in ``_prepare``; ``still_received`` only checks the status. A
    delivery quarantined by another processor and released (back to ``received``, with
    ``released_by``) in the gap is processed with the stale ``released_by=None``: quarantined
    again, and the human's release is lost (the release's own re-run then finds nothing)."""
    world, hub = wh
    stranger = json.loads(json.dumps(ISSUE))
    stranger["sender"]["id"] = 424242  # unknown sender: quarantined unless released by a human
    delivery_id = _store(hub, world, stranger)
    with hub.db.read() as s:
        alice = admin.human_by_name(s, "alice").id

    def other_processor_then_release() -> None:
        monkeypatch.setattr(jobs, "_prepare", original)  # the other processor is not interleaved
        try:
            assert process_delivery(hub, delivery_id) == "quarantined"
        finally:
            monkeypatch.setattr(jobs, "_prepare", wrapped)
        with hub.db.write() as s:
            quarantine.release(s, hub.clock, delivery_id, as_human_id=alice)

    original = jobs._prepare
    _between_prepare_and_write(monkeypatch, other_processor_then_release)
    wrapped = jobs._prepare
    process_delivery(hub, delivery_id)
    process_delivery(hub, delivery_id)  # what the release's caller runs next
    with hub.db.read() as s:
        d = s.get(Delivery, delivery_id)
        assert d is not None
        assert (d.status, d.human_id) == ("processed", alice), (d.status, d.quarantine_reason)
        assert s.execute(select(Todo.id).where(Todo.delivery_id == delivery_id)).scalar() == d.todo_id
