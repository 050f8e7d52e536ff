"""``switchboard todo|delivery|quarantine|inbox list --cursor``: every list of the CLI pages with
the cursor its last page printed (issue 18 item 4), run as real processes."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from typing import Any

from switchboard import admin
from switchboard.hub import Hub
from switchboard.inbox import items as inbox
from switchboard.models import Delivery
from switchboard.queue import todos
from tests.conftest import World, cli, cli_env, switchboard_exe


def _walk(env: dict[str, str], key: str, *args: str) -> list[str]:
    ids: list[str] = []
    extra: tuple[str, ...] = ()
    for _ in range(20):
        page: dict[str, Any] = cli(env, *args, *extra)
        ids += [row["id"] for row in page[key]]
        if page["next_cursor"] is None:
            assert page["has_more"] is False
            return ids
        extra = ("--cursor", page["next_cursor"])
    raise AssertionError("the walk does not end")


def test_every_cli_list_pages_with_its_cursor(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        with hub.db.write() as s:
            made = [todos.create(s, hub.clock, project_id=world.project_id, queue="q", kind="k", title=f"t{i}",
                                 payload=None)[0].id for i in range(5)]
            now = hub.clock.now()
            deliveries = [Delivery(source_id=world.source_id, project_id=world.project_id, status="quarantined",
                                   raw_body=b"{}", received_at=now - timedelta(seconds=i)) for i in range(5)]
            s.add_all(deliveries)
            s.flush()
            newest_first = [d.id for d in deliveries]
            asked = [inbox.post(s, hub.clock, agent_id=world.agent_id, grants=admin.grants_of(s, world.agent_id),
                                kind="question", project="acme", title=f"q{i}")["id"] for i in range(3)]
    finally:
        hub.close()
    env = cli_env(world.settings.home)
    assert _walk(env, "todos", "todo", "list", "--limit", "2") == made
    assert _walk(env, "deliveries", "delivery", "list", "--limit", "2") == newest_first
    assert _walk(env, "deliveries", "quarantine", "list", "--limit", "2") == newest_first[::-1]
    assert _walk(env, "items", "inbox", "list", "--limit", "2") == asked
    text = subprocess.run([switchboard_exe(), "todo", "list", "--limit", "2"], env=env, capture_output=True,
                          text=True, timeout=60, check=True).stdout
    assert "(more: --cursor c1." in text


def test_a_malformed_cursor_exits_2_with_invalid_argument(world: World) -> None:
    env = cli_env(world.settings.home)
    for group in ("todo", "delivery", "quarantine", "inbox"):
        proc = subprocess.run([switchboard_exe(), group, "list", "--cursor", "c1.nope", "--json"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 2 and '"invalid_argument"' in proc.stdout, (group, proc.stdout, proc.stderr)


def test_delivery_list_lines_up_ids_of_both_lengths(world: World) -> None:
    # Issue 11 changed delivery ids from dlv_ + 16 characters to dlv_ + 26 (new_ordered_id); an
    # instance keeps both, and the text view pads to the longest id on the page.
    from switchboard.models.base import new_id, new_ordered_id

    hub = Hub(world.settings, role="cli")
    try:
        with hub.db.write() as s:
            now = hub.clock.now()
            s.add_all([Delivery(id=new_id("dlv"), source_id=world.source_id, project_id=world.project_id,
                                status="received", raw_body=b"{}", received_at=now - timedelta(seconds=1)),
                       Delivery(id=new_ordered_id("dlv", now), source_id=world.source_id,
                                project_id=world.project_id, status="received", raw_body=b"{}", received_at=now)])
    finally:
        hub.close()
    text = subprocess.run([switchboard_exe(), "delivery", "list"], env=cli_env(world.settings.home),
                          capture_output=True, text=True, timeout=60, check=True).stdout
    lines = text.strip().splitlines()
    assert [len(line.split(" ")[0]) for line in lines] == [30, 20]
    assert lines[0].index(" ") == 30 and lines[1].index(" 20") == 30  # the times start in one column
