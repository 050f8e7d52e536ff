"""notify_subscribe seeds from readable projects only (issue 13 item 10)."""

from __future__ import annotations

from switchboard import admin
from switchboard.feed.events import append
from switchboard.hub import Hub
from switchboard.mcp_server.callers import resolve_caller
from switchboard.mcp_server.calls import call_tool
from tests.conftest import World


def test_an_unscoped_subscription_seeds_from_readable_projects_only(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        with hub.db.write() as s:
            other = admin.add_project(s, "secretproj")
            mine = append(s, hub.clock, world.project_id, "todo.created", "mine", subject_id="td_1").id
        caller = resolve_caller(hub, world.token)
        first = call_tool(hub, caller, "notify_subscribe", {"kinds": ["todo.created"]})["structuredContent"]
        assert first["cursor"] == mine
        with hub.db.write() as s:  # activity in a project the agent cannot read
            for i in range(5):
                append(s, hub.clock, other.id, "todo.created", f"theirs {i}", subject_id=f"td_x{i}")
        second = call_tool(hub, caller, "notify_subscribe", {"kinds": ["todo.created"]})["structuredContent"]
        assert second["cursor"] == mine  # unmoved by the other project's events
    finally:
        hub.close()
