"""``switchboard inbox|friend``: agents' questions and approvals, and friendships between agents."""

from __future__ import annotations

from typing import Any

import click

from switchboard import admin as admin_ops
from switchboard.cli.base import admin, cursor_option, main, open_hub, with_more
from switchboard.inbox.items import DECIDED


@main.group()
def inbox() -> None:
    """Questions and approvals from agents: list them, answer, decide (the human side)."""


@inbox.command("list")
@click.option("--human", "human_name", default=None, help="Only items waiting on this human.")
@click.option("--status", type=click.Choice(["open", "answered", "decided", "expired", "all"]), default="open",
              show_default=True)
@click.option("--limit", default=100, type=click.IntRange(1, 1000), show_default=True)
@cursor_option
@admin
def inbox_list(human_name: str | None, status: str, limit: int, cursor: str | None) -> tuple[dict[str, Any], str]:
    """List inbox items, oldest first, one page; --cursor continues."""
    from switchboard.inbox import items as inbox_ops

    hub = open_hub()
    with hub.db.read() as s:
        human_id = admin_ops.human_by_name(s, human_name).id if human_name else None
        page = inbox_ops.page_for_human(s, human_id=human_id, status=None if status == "all" else status,
                                        limit=limit, cursor=cursor)
    rows = page["items"]
    lines = []
    for r in rows:
        extra = f" options: {', '.join(r['options'])}" if r["options"] else ""
        if r["kind"] == "permission":
            extra = f" (reply `yes {r['request_id']}` or `no {r['request_id']}`): {r['body'] or ''}"
        result = f" -> {r['answer'] or r['decision']}" if r["status"] != "open" and (r["answer"] or r["decision"]) else ""
        lines.append(f"{r['id']} [{r['kind']} {r['status']}] {r['project'] or '-'} from {r['agent']} to {r['human']}: "
                     f"{r['title']}{extra}{result}")
    return page, with_more("\n".join(lines) or "no inbox items", page)


def _resolve_as(item_id: str, human_name: str | None, **kwargs: Any) -> dict[str, Any]:
    from switchboard.errors import NotFound
    from switchboard.inbox import items as inbox_ops
    from switchboard.models import InboxItem

    hub = open_hub()
    try:
        with hub.db.write() as s:
            row_ = s.get(InboxItem, item_id)
            if row_ is None:
                raise NotFound("no such inbox item")
            human_id = admin_ops.human_by_name(s, human_name).id if human_name else row_.human_id
            data, agent_id = inbox_ops.resolve(s, hub.clock, item_id, via="cli", human_id=human_id, **kwargs)
        # Over Redis this rings the agent's inbox_wait at once; embedded, `serve` notices the
        # resolution on its next maintenance pass (every reap interval, 2 s by default).
        hub.broker.publish_inbox(agent_id)
    finally:
        hub.close()
    return data


@inbox.command("answer")
@click.argument("item_id")
@click.argument("answer")
@click.option("--as", "human_name", default=None, help="The answering human (default: the item's human).")
@admin
def inbox_answer(item_id: str, answer: str, human_name: str | None) -> tuple[dict[str, Any], str]:
    """Answer the question ITEM_ID with ANSWER (one of its options, when it has some)."""
    data = _resolve_as(item_id, human_name, answer=answer)
    return data, f"{item_id} answered"


@inbox.command("decide")
@click.argument("item_id")
@click.argument("decision", type=click.Choice(["approve", "deny"]))
@click.option("--note", default=None, help="Why (shown to the agent).")
@click.option("--as", "human_name", default=None, help="The deciding human (default: the item's human).")
@admin
def inbox_decide(item_id: str, decision: str, note: str | None, human_name: str | None) -> tuple[dict[str, Any], str]:
    """Approve or deny the approval ITEM_ID."""
    data = _resolve_as(item_id, human_name, decision=decision, note=note)
    return data, f"{item_id} {DECIDED[decision]}"


@main.group()
def friend() -> None:
    """Friendships between agents of different humans: list and revoke them (the human side)."""


@friend.command("list")
@click.option("--human", "human_name", default=None, help="Only friendships this human is part of.")
@admin
def friend_list(human_name: str | None) -> tuple[dict[str, Any], str]:
    """List friendships, newest first."""
    from switchboard.friends import requests as friends

    hub = open_hub()
    try:
        with hub.db.read() as s:
            human_id = admin_ops.human_by_name(s, human_name).id if human_name else None
            rows = friends.list_for_human(s, human_id)
    finally:
        hub.close()
    lines = [f"{f['friendship_id']} {f['from_agent']} ({f['from_human']}) -> {f['to_agent']} ({f['to_human']}) "
             f"on {', '.join(f['queues'])}{'' if f['active'] else ' [revoked]'}" for f in rows]
    return {"friendships": rows}, "\n".join(lines) or "no friendships"


@friend.command("revoke")
@click.argument("friendship_id")
@click.option("--as", "human_name", default=None,
              help="The revoking human, either side (default: the human whose agent receives the work).")
@admin
def friend_revoke(friendship_id: str, human_name: str | None) -> tuple[dict[str, Any], str]:
    """Revoke FRIENDSHIP_ID: no new todos flow through it from this moment."""
    from switchboard.errors import NotFound
    from switchboard.friends import requests as friends
    from switchboard.models import Friendship

    hub = open_hub()
    try:
        with hub.db.write() as s:
            fs = s.get(Friendship, friendship_id)
            if fs is None:
                raise NotFound("no such friendship")
            human_id = admin_ops.human_by_name(s, human_name).id if human_name else fs.to_human_id
            data = friends.revoke(s, hub.clock, friendship_id, human_id=human_id)
    finally:
        hub.close()
    return data, f"{friendship_id} revoked"
