"""``switchboard todo``: add work by hand, assign it, and handle dead letters (the human side)."""

from __future__ import annotations

import json
from typing import Any

import click

from switchboard import admin as admin_ops
from switchboard.cli.base import admin, cursor_option, main, open_hub, with_more


@main.group()
def todo() -> None:
    """Todos: add work by hand, assign it, and handle dead letters (the human side)."""


@todo.command("add")
@click.option("--project", "project_name", required=True)
@click.option("--title", required=True, help="One line: what needs doing.")
@click.option("--queue", default="default", show_default=True)
@click.option("--assign", "agent_name", default=None, help="Only this agent may claim it (and is woken).")
@click.option("--priority", default=0, type=click.IntRange(-1000, 1000), show_default=True)
@click.option("--max-attempts", default=5, type=click.IntRange(1, 100), show_default=True)
@admin
def todo_add(project_name: str, title: str, queue: str, agent_name: str | None, priority: int,
             max_attempts: int) -> tuple[dict[str, Any], str]:
    """Add a todo by hand; the hub wakes an eligible agent within seconds."""
    from switchboard.queue import todos as todo_ops

    line = todo_ops.check_title(title)
    hub = open_hub()
    admin_ops.check_name("queue", queue)
    with hub.db.write() as s:
        project_row = admin_ops.project_by_name(s, project_name)
        agent_id = admin_ops.assignable_agent(s, agent_name, project_row.id).id if agent_name else None
        row_, _ = todo_ops.create(s, hub.clock, project_id=project_row.id, queue=queue, kind="manual",
                                  title=line, payload=None)
        row_.priority, row_.max_attempts, row_.assigned_agent_id = priority, max_attempts, agent_id
        data = todo_ops.row(row_)
    data["assigned_agent"] = agent_name
    return data, f"todo {data['id']} on {queue}: {line}" + (
        f"\nassigned to {agent_name}: only it may claim it, and it is woken" if agent_name else "")


@todo.command("list")
@click.option("--project", "project_name", default=None)
@click.option("--state", type=click.Choice(["pending", "claimed", "done", "failed", "cancelled"]), default=None)
@click.option("--dead-letters", is_flag=True, help="Only dead-lettered todos.")
@click.option("--limit", default=50, type=click.IntRange(1, 1000), show_default=True)
@cursor_option
@admin
def todo_list_cmd(project_name: str | None, state: str | None, dead_letters: bool,
                  limit: int, cursor: str | None) -> tuple[dict[str, Any], str]:
    """List todos (oldest first), or only the dead letters, one page; --cursor continues."""
    from switchboard.queue import todos as todo_ops

    hub = open_hub()
    with hub.db.read() as s:
        project_id = admin_ops.project_by_name(s, project_name).id if project_name else None
        page = todo_ops.page_of(s, None if project_id is None else [project_id], state=state,
                                dead_letters=dead_letters, limit=limit, cursor=cursor, max_limit=1000)
        rows = page["todos"]
        _name_assignees(s, rows)
    text = "\n".join(f"{r['id']} [{r['state']}{' dead' if r['dead_lettered'] else ''}] {r['queue']}: {r['title']}"
                     + (f" (assigned to {r['assigned_agent']})" if r.get("assigned_agent") else "")
                     for r in rows) or "no todos"
    return page, with_more(text, page)


@todo.command("show")
@click.argument("todo_id")
@admin
def todo_show(todo_id: str) -> tuple[dict[str, Any], str]:
    """A todo with its payload and attempts."""
    from switchboard.errors import NotFound
    from switchboard.models import Todo
    from switchboard.queue import todos as todo_ops

    hub = open_hub()
    with hub.db.read() as s:
        row_ = s.get(Todo, todo_id)
        if row_ is None:
            raise NotFound("no such todo")
        data = todo_ops.row(row_, with_payload=True)
        data["attempts"] = todo_ops.attempts_of(s, todo_id)
        _name_assignees(s, [data])
    lines = [f"{data['id']} [{data['state']}] {data['queue']}: {data['title']}"]
    if data.get("assigned_agent"):
        lines.append(f"assigned to: {data['assigned_agent']}")
    if data["ring_count"]:
        lines.append(f"rung {data['ring_count']} time(s), last at {data['last_rung_at']}"
                     + (" (never claimed)" if not data["attempts"] else ""))
    if data.get("payload") is not None:
        lines.append("payload: " + json.dumps(data["payload"], indent=2, default=str))
    if data.get("result") is not None:
        lines.append("result: " + json.dumps(data["result"], default=str))
    lines += [f"  attempt {a['number']} by {a['agent_id']} at {a['claimed_at']}: {a['outcome'] or 'open'}"
              + (f" ({a['summary']})" if a["summary"] else "") for a in data["attempts"]]
    return data, "\n".join(lines)


def _name_assignees(session: Any, rows: list[dict[str, Any]]) -> None:
    """Add ``assigned_agent`` (the agent's name, or ``None``) to each todo row."""
    from sqlalchemy import select

    from switchboard.models import Agent

    ids = {r["assigned_agent_id"] for r in rows if r.get("assigned_agent_id")}
    names = dict(session.execute(select(Agent.id, Agent.name).where(Agent.id.in_(ids))).all()) if ids else {}
    for r in rows:
        r["assigned_agent"] = names.get(r.get("assigned_agent_id") or "")


@todo.command("assign")
@click.argument("todo_id")
@click.argument("agent_name")
@admin
def todo_assign(todo_id: str, agent_name: str) -> tuple[dict[str, Any], str]:
    """Assign a pending todo to AGENT_NAME: only it may claim it, and it is woken."""
    from switchboard.queue import todos as todo_ops

    hub = open_hub()
    with hub.db.write() as s:
        from switchboard.errors import NotFound
        from switchboard.models import Todo

        todo_row = s.get(Todo, todo_id)
        if todo_row is None:
            raise NotFound("no such todo")
        agent_row = admin_ops.assignable_agent(s, agent_name, todo_row.project_id)
        row_ = todo_ops.assign(s, hub.clock, todo_id, agent_row.id)
        data = todo_ops.row(row_)
    return data, f"{todo_id} assigned to {agent_name}"


@todo.command("retry")
@click.argument("todo_id")
@admin
def todo_retry(todo_id: str) -> tuple[dict[str, Any], str]:
    """Send a dead-lettered todo back to pending with a fresh attempt budget."""
    from switchboard.queue import todos as todo_ops

    hub = open_hub()
    with hub.db.write() as s:
        data = todo_ops.retry_dead_letter(s, hub.clock, todo_id)
    return data, f"{todo_id} is pending again"


@todo.command("cancel")
@click.argument("todo_id")
@admin
def todo_cancel(todo_id: str) -> tuple[dict[str, Any], str]:
    """Withdraw a todo (a holder's later complete or fail is refused)."""
    from switchboard.queue import todos as todo_ops

    hub = open_hub()
    with hub.db.write() as s:
        data = todo_ops.cancel(s, hub.clock, todo_id)
    return data, f"{todo_id} cancelled"
