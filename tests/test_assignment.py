"""Work is assigned only to agents with a work grant; one not_found for unknown and foreign agents (issue 13 item 1)."""

from __future__ import annotations

import json
import subprocess

import httpx2
import pytest
from sqlalchemy import delete, select

from switchboard import admin
from switchboard.hub import Hub
from switchboard.models import Todo
from tests.conftest import LiveApp, cli_env, switchboard_exe


@pytest.fixture
def tenants(live: LiveApp) -> str:
    """bob owns project bobs with agent bobagent; alice owns acme (claude1 works there). Returns alice's token."""
    hub = Hub(live.world.settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_owner(s, "acme", "alice")
            admin.add_human(s, "bob")
            admin.add_project(s, "bobs")
            admin.add_owner(s, "bobs", "bob")
            admin.add_agent(s, "bobagent", "bob")
            admin.grant(s, "bobagent", "bobs", "work")
            admin.add_agent(s, "reader", "alice")
            admin.grant(s, "reader", "acme", "read")
            return admin.vend_human_token(s, "alice")
    finally:
        hub.close()


def _cli(live: LiveApp, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([switchboard_exe(), *args, "--json"], check=False, env=cli_env(live.world.settings.home),
                          capture_output=True, text=True, timeout=60)


def test_rest_add_with_assign_needs_a_work_grant_and_answers_alike(live: LiveApp, tenants: str) -> None:
    headers = {"Authorization": f"Bearer {tenants}"}
    answers = []
    for name in ("bobagent", "nosuchagent", "reader"):
        r = httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": "t", "assign": name},
                        headers=headers)
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        answers.append(r.json())
    assert answers[0] == answers[1] == answers[2]
    with live.hub.db.read() as s:
        assert s.execute(select(Todo)).first() is None  # nothing was created for a refused assignee
    r = httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": "t", "assign": "claude1"},
                    headers=headers)
    assert r.status_code == 201 and r.json()["assigned_agent_id"] == live.world.agent_id


def test_rest_assign_action_needs_a_work_grant(live: LiveApp, tenants: str) -> None:
    headers = {"Authorization": f"Bearer {tenants}"}
    todo = httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": "t"}, headers=headers).json()
    bodies = []
    for name in ("bobagent", "nosuchagent"):
        r = httpx2.post(f"{live.url}/api/v1/human/todos/{todo['id']}/assign", json={"agent": name}, headers=headers)
        assert r.status_code == 404
        bodies.append(r.json())
    assert bodies[0] == bodies[1]
    r = httpx2.post(f"{live.url}/api/v1/human/todos/{todo['id']}/assign", json={"agent": "claude1"}, headers=headers)
    assert r.status_code == 200


def test_cli_add_and_assign_need_a_work_grant_and_answer_alike(live: LiveApp, tenants: str) -> None:
    outs = []
    for name in ("bobagent", "nosuchagent"):
        proc = _cli(live, "todo", "add", "--project", "acme", "--title", "t", "--assign", name)
        assert proc.returncode == 2
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1] and outs[0]["error"]["code"] == "not_found"
    todo = json.loads(_cli(live, "todo", "add", "--project", "acme", "--title", "t").stdout)
    outs = [json.loads(_cli(live, "todo", "assign", todo["id"], name).stdout) for name in ("bobagent", "nosuchagent")]
    assert outs[0] == outs[1] and outs[0]["error"]["code"] == "not_found"
    assert json.loads(_cli(live, "todo", "assign", todo["id"], "claude1").stdout)["assigned_agent_id"]


def test_a_revoked_assignee_is_not_woken(live: LiveApp, tenants: str) -> None:
    from switchboard.notify.wakes import wake_for

    headers = {"Authorization": f"Bearer {tenants}"}
    todo = httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": "t", "assign": "claude1"},
                       headers=headers).json()
    with live.hub.db.write() as s:
        from switchboard.models import Grant

        s.execute(delete(Grant).where(Grant.agent_id == live.world.agent_id))
    with live.hub.db.read() as s:
        assert wake_for(s, s.get(Todo, todo["id"])).agent_ids == []
