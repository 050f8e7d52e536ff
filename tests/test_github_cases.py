"""All twelve real GitHub payloads in ../shared/cases/github/ through the running server."""

from __future__ import annotations

from sqlalchemy import select

from switchboard.models import Delivery, FeedEvent, Todo
from tests.conftest import CASES, LiveApp, github_headers, wait_for

WORK_EVENTS = {"issues", "issue_comment", "pull_request", "pull_request_review", "push", "workflow_run",
               "check_run", "release", "discussion"}


def test_all_github_cases_are_accepted_with_titles(live: LiveApp) -> None:
    files = sorted(CASES.joinpath("github").glob("*.json"))
    assert len(files) == 12, f"expected the twelve shared GitHub payloads under {CASES}"
    # workflow_run.completed.json is sent by another user (15669918): link them too.
    from switchboard import admin

    with live.hub.db.write() as s:
        admin.link_identity(s, "alice", "github", "15669918")
    ids: dict[str, str] = {}
    for path in files:
        body = path.read_bytes()
        event = path.name.split(".", 1)[0]
        resp = live.post_hook(body, github_headers(body, live.world.secret, event=event))
        assert resp.status_code == 202, (path.name, resp.status_code, resp.text)
        ids[path.name] = resp.json()["delivery_id"]

    def all_done() -> bool:
        with live.hub.db.read() as s:
            rows = s.execute(select(Delivery.status).where(Delivery.id.in_(list(ids.values())))).scalars().all()
        return len(rows) == 12 and all(r != "received" for r in rows)

    wait_for(all_done, timeout=20)
    with live.hub.db.read() as s:
        for name, delivery_id in ids.items():
            d = s.get(Delivery, delivery_id)
            assert d is not None and d.status == "processed", (name, d and d.status, d and d.error_code)
            event = name.split(".", 1)[0]
            if event in WORK_EVENTS:
                todo = s.get(Todo, d.todo_id)
                assert todo is not None and todo.title and "\n" not in todo.title, name
                assert todo.kind.startswith(f"github.{event}")
            else:
                assert d.todo_id is None
                assert s.execute(select(FeedEvent).where(FeedEvent.subject_id == d.id)).scalars().first()
        titles = sorted(t.title for t in s.execute(select(Todo)).scalars())
    assert len(titles) == 11
    assert "PR #2 opened in Codertocat/Hello-World: Update the README with new information." in titles
    # GitHub's sample push deletes the tag simple-tag (ref refs/tags/..., deleted: true).
    assert "Tag simple-tag deleted in Codertocat/Hello-World" in titles
