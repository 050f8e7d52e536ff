"""Through the running server: a signed delivery with a planted token becomes a todo with a ref,
its raw body is sealed at rest, and the REST tool route returns the value to a working agent."""

from __future__ import annotations

import json

import httpx2
from sqlalchemy import select, text

from switchboard.intake import vault
from switchboard.models import Delivery, FeedEvent, Todo
from tests.conftest import CASES, LiveApp, github_headers, wait_for
from tests.intake.planted_secrets import corpus

TOKEN = next(p.value for p in corpus(seed=23) if p.fmt == "slack_bot_token")


def test_planted_token_becomes_a_ref_and_comes_back_only_through_secret_fetch(live: LiveApp) -> None:
    payload = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    payload["issue"]["title"] = f"bot token {TOKEN} is in the logs"
    body = json.dumps(payload).encode()
    resp = live.post_hook(body, github_headers(body, live.world.secret, event="issues"))
    assert resp.status_code == 202
    delivery_id = resp.json()["delivery_id"]

    def processed() -> Todo | None:
        with live.hub.db.read() as s:
            d = s.get(Delivery, delivery_id)
            return s.get(Todo, d.todo_id) if d is not None and d.todo_id else None

    todo = wait_for(processed, timeout=20)
    assert TOKEN not in todo.title and "type=slack_bot_token]" in todo.title
    ref = todo.title.split("[secret ref=", 1)[1].split(" ", 1)[0]
    with live.hub.db.read() as s:
        stored = s.execute(text("SELECT raw_body FROM deliveries WHERE id = :i"), {"i": delivery_id}).scalar_one()
    assert stored.startswith(vault.BODY_MAGIC) and TOKEN.encode() not in stored

    auth = {"Authorization": f"Bearer {live.world.token}"}
    names = [t["name"] for t in httpx2.get(f"{live.url}/api/v1/agent/tools", headers=auth, timeout=10).json()["tools"]]
    assert "secret_fetch" in names
    got = httpx2.post(f"{live.url}/api/v1/agent/tools/secret_fetch", json={"ref": ref}, headers=auth, timeout=10)
    assert got.json()["structuredContent"] == {"ref": ref, "value": TOKEN}
    with live.hub.db.read() as s:
        kinds = [e.kind for e in s.execute(select(FeedEvent).order_by(FeedEvent.id)).scalars()]
    assert kinds[-1] == "secret.fetched"
