"""Secrets end to end: planted in a delivery, refs in the todo and title, the value only via secret_fetch."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from sqlalchemy import select, text

from switchboard import admin
from switchboard.hub import Hub
from switchboard.intake import vault
from switchboard.mcp_server.callers import resolve_caller
from switchboard.mcp_server.calls import call_tool
from switchboard.models import Delivery, FeedEvent, SecretRef, Todo
from switchboard.notify.wakes import wake_for
from switchboard.queue.jobs import process_delivery
from tests.conftest import CASES, World, store_github_delivery
from tests.intake.planted_secrets import corpus

ISSUE = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
PLANTED = corpus(seed=11)
TOKEN = next(p.value for p in PLANTED if p.fmt == "github_pat_classic")
PEM = next(p.value for p in PLANTED if p.fmt == "pem_rsa_private_key")
HOOK = next(p.value for p in PLANTED if p.fmt == "discord_webhook_url")
VALUES = [TOKEN, PEM, HOOK]


def _deliver(hub: Hub, world: World, payload: dict[str, Any]) -> str:
    delivery_id = store_github_delivery(hub, world, json.dumps(payload).encode())
    assert process_delivery(hub, delivery_id) == "processed"
    return delivery_id


@pytest.fixture
def planted(world: World) -> tuple[Hub, str]:
    payload = json.loads(json.dumps(ISSUE))
    payload["issue"]["title"] = f"CI broke, token {TOKEN} in logs"
    payload["issue"]["body"] = f"key:\n{PEM}\nhook {HOOK}\nand again {TOKEN}"
    hub = Hub(world.settings, role="cli")
    delivery_id = _deliver(hub, world, payload)
    yield hub, delivery_id
    hub.close()


def _caller(hub: Hub, token: str) -> Any:
    return resolve_caller(hub, token)


def test_title_payload_and_wake_carry_refs_never_values(planted: tuple[Hub, str], world: World) -> None:
    hub, _ = planted
    with hub.db.read() as s:
        todo = s.execute(select(Todo)).scalars().one()
        assert "[secret ref=sec_" in todo.title and "type=github_pat]" in todo.title
        body = todo.payload["issue"]["body"]
        assert body.count("[secret ref=") == 3 and "type=private_key" in body
        refs = s.execute(select(SecretRef)).scalars().all()
        assert len(refs) == 3 and {r.project_id for r in refs} == {world.project_id}
        wake = wake_for(s, todo)
    for value in VALUES:
        assert value not in todo.title and value not in json.dumps(todo.payload) and value not in wake.content


def test_no_secret_value_anywhere_in_the_database(planted: tuple[Hub, str]) -> None:
    hub, _ = planted
    tables = ["todos", "feed_events", "secret_refs", "attempts", "deliveries", "humans", "projects"]
    with hub.db.read() as s:
        for table in tables:
            dump = repr(s.execute(text(f"SELECT * FROM {table}")).all())
            for value in VALUES:
                assert value[:40] not in dump, table


def test_work_grant_fetches_the_value_and_the_fetch_is_audited(planted: tuple[Hub, str], world: World,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    hub, _ = planted
    caplog.set_level(logging.DEBUG)
    with hub.db.read() as s:
        row = next(r for r in s.execute(select(SecretRef)).scalars() if r.kind == "github_pat")
    result = call_tool(hub, _caller(hub, world.token), "secret_fetch", {"ref": row.ref})
    assert result["isError"] is False and result["structuredContent"] == {"ref": row.ref, "value": TOKEN}
    with hub.db.read() as s:
        event = s.execute(select(FeedEvent).where(FeedEvent.kind == "secret.fetched")).scalars().one()
        assert event.data == {"ref": row.ref, "kind": "github_pat", "agent_id": world.agent_id, "agent": "claude1"}
        assert TOKEN not in event.title and row.ref in event.title
    assert all(v[:40] not in caplog.text for v in VALUES)


def test_read_grant_foreign_and_unknown_refs_are_the_same_not_found(planted: tuple[Hub, str], world: World) -> None:
    hub, _ = planted
    with hub.db.write() as s:
        admin.add_agent(s, "reader", "alice")
        admin.grant(s, "reader", "acme", "read")
        admin.add_agent(s, "stranger", "alice")
        reader = admin.vend_token(s, "reader")
        stranger = admin.vend_token(s, "stranger")
    with hub.db.read() as s:
        ref = s.execute(select(SecretRef.ref)).scalars().first()
    answers = [call_tool(hub, _caller(hub, tok), "secret_fetch", {"ref": r})["structuredContent"]
               for tok, r in ((reader, ref), (stranger, ref), (world.token, "sec_" + "A" * 32),
                              (world.token, "not-a-ref"))]
    assert all(a == answers[0] for a in answers) and answers[0]["code"] == "not_found"
    with hub.db.read() as s:
        assert s.execute(select(FeedEvent).where(FeedEvent.kind == "secret.fetched")).scalars().all() == []


def test_fetches_are_rate_limited(planted: tuple[Hub, str], world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, _ = planted
    monkeypatch.setattr(vault, "LIMITER", vault.FetchLimiter(limit=3, window=60))
    with hub.db.read() as s:
        ref = s.execute(select(SecretRef.ref)).scalars().first()
    caller = _caller(hub, world.token)
    codes = [call_tool(hub, caller, "secret_fetch", {"ref": ref})["structuredContent"].get("code")
             for _ in range(4)]
    assert codes == [None, None, None, "rate_limited"]


def test_processing_logs_no_secret_value(world: World, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    payload = json.loads(json.dumps(ISSUE))
    payload["issue"]["body"] = " ".join(VALUES)
    hub = Hub(world.settings, role="cli")
    try:
        _deliver(hub, world, payload)
    finally:
        hub.close()
    assert all(v[:40] not in caplog.text for v in VALUES)


def test_rotate_in_another_process_while_a_server_runs_loses_nothing(world: World) -> None:
    """`switchboard vault rotate` (a separate process) while a hub keeps sealing: every secret
    and body stays readable, before and after, and a second rotate works too."""
    import subprocess

    from tests.conftest import cli_env, switchboard_exe

    hub = Hub(world.settings, role="cli")  # stands for the running server
    try:
        refs: list[str] = []

        def plant(n: int) -> None:
            payload = json.loads(json.dumps(ISSUE))
            payload["issue"]["number"] = n
            payload["issue"]["body"] = f"token {TOKEN}"
            _deliver(hub, world, payload)
            with hub.db.read() as s:
                refs[:] = [r.ref for r in s.execute(select(SecretRef)).scalars()]

        plant(1)
        for round_ in (1, 2):
            proc = subprocess.run([switchboard_exe(), "vault", "rotate", "--json"], env=cli_env(world.settings.home),
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout)["unreadable"] == []
            plant(10 + round_)  # sealed by the "server" after the rotate
        caller = _caller(hub, world.token)
        values = {call_tool(hub, caller, "secret_fetch", {"ref": r})["structuredContent"].get("value") for r in refs}
        assert values == {TOKEN}
        with hub.db.read() as s:
            bodies = [d.raw_body for d in s.execute(select(Delivery)).scalars()]
        assert all(b is None or b.startswith(b"{") for b in bodies)
    finally:
        hub.close()
