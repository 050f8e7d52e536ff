"""``/ui/quarantine``, ``/ui/todos`` and ``/ui/feed`` (issue 15, items 3-5).

Every row shown belongs to a project the signed-in human owns (``g.owned``); an id outside
them is ``not_found``, as over REST. Actions call the functions the CLI and REST call:
:func:`switchboard.intake.quarantine.release` then
:func:`switchboard.queue.jobs.process_delivery`, :func:`~switchboard.intake.quarantine.discard`,
:func:`switchboard.admin.link_identity`, and :mod:`switchboard.queue.todos`'s ``create``,
``retry_dead_letter``, ``cancel`` and ``assign`` (which refuses an agent without a ``work``
grant). Todo payloads are shown as stored: secret values were replaced by refs at intake.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import flash, g, redirect, render_template, request, url_for
from sqlalchemy import select

from switchboard import admin
from switchboard.errors import InvalidArgument, NotFound
from switchboard.feed.events import settled
from switchboard.feed.pages import event_view
from switchboard.intake import quarantine
from switchboard.models import Agent, Delivery, FeedEvent, Grant, Human, ProjectOwner, Todo, in_state
from switchboard.queue import todos
from switchboard.text import whole_number
from switchboard.web.ui.base import bp, hub, owned_project, write_session

FEED_PAGE = 50
TODO_PAGE = 100


# --- quarantine ---------------------------------------------------------------------------------

def _owners(s: Any, project_ids: list[str]) -> dict[str, list[str]]:
    rows = s.execute(select(ProjectOwner.project_id, Human.name).join(Human, Human.id == ProjectOwner.human_id)
                     .where(ProjectOwner.project_id.in_(project_ids)).order_by(Human.name)).all()  # type: ignore[attr-defined]
    out: dict[str, list[str]] = {}
    for pid, name in rows:
        out.setdefault(pid, []).append(name)
    return out


@bp.get("/quarantine")
def quarantine_page() -> Any:
    """Held deliveries of owned projects with reason and sender, oldest first."""
    with hub().db.read() as s:
        rows = [r for pid in g.owned for r in quarantine.list_quarantined(s, pid)]
        owners = _owners(s, g.owned) if g.owned else {}
    rows.sort(key=lambda r: r["received_at"])
    return render_template("ui/quarantine.html", rows=rows, owners=owners, page="quarantine")


def _held(s: Any, delivery_id: str) -> Delivery:
    delivery = s.get(Delivery, delivery_id)
    if delivery is None or delivery.project_id not in g.owned:
        raise NotFound("no such delivery")
    return delivery  # type: ignore[no-any-return]


@bp.post("/quarantine/<delivery_id>/release")
def quarantine_release(delivery_id: str) -> Any:
    """Process a held delivery again, once; ``as_self`` answers for a sender nobody links."""
    from switchboard.queue.jobs import process_delivery

    as_self = request.form.get("as_self") == "1"
    with write_session() as s:
        _held(s, delivery_id)
        quarantine.release(s, hub().clock, delivery_id, g.human.id if as_self else None)
    status = process_delivery(hub(), delivery_id)
    flash(f"Released {delivery_id}: {status}")
    return redirect(url_for("ui.quarantine_page"), code=303)


@bp.post("/quarantine/<delivery_id>/discard")
def quarantine_discard(delivery_id: str) -> Any:
    """Drop a held delivery and its body."""
    with write_session() as s:
        _held(s, delivery_id)
        quarantine.discard(s, hub().clock, delivery_id)
    flash(f"Discarded {delivery_id}")
    return redirect(url_for("ui.quarantine_page"), code=303)


@bp.post("/quarantine/<delivery_id>/link")
def quarantine_link(delivery_id: str) -> Any:
    """Link the held delivery's sender to an owner of its project (then release it)."""
    human_name = request.form.get("human") or ""
    with write_session() as s:
        delivery = _held(s, delivery_id)
        if human_name not in _owners(s, [delivery.project_id]).get(delivery.project_id, []):
            raise InvalidArgument("link the sender to an owner of the delivery's project")
        rows = [r for r in quarantine.list_quarantined(s, delivery.project_id) if r["id"] == delivery_id]
        sender = rows[0]["sender"] if rows else None
        if sender is None:
            raise InvalidArgument("this delivery names no sender to link; release it as yourself instead")
        if sender["is_bot"]:
            raise InvalidArgument("bots are never linked to a human; release it as yourself instead")
        admin.link_identity(s, human_name, sender["provider"], sender["external_id"], sender["workspace"] or "",
                                login=sender["login"])
    flash(f"Linked {sender['provider']} account {sender['external_id']} to {human_name}; release the delivery now")
    return redirect(url_for("ui.quarantine_page"), code=303)


# --- todos --------------------------------------------------------------------------------------

def _granted_agents(s: Any, project_ids: list[str]) -> dict[str, list[str]]:
    """``{project_id: [agent name]}``: agents with a ``work`` grant, the only ones assignable."""
    rows = s.execute(select(Grant.project_id, Agent.name).join(Agent, Agent.id == Grant.agent_id)
                     .where(Grant.project_id.in_(project_ids), Grant.role == "work")  # type: ignore[attr-defined]
                     .order_by(Agent.name)).all()
    out: dict[str, list[str]] = {}
    for pid, name in rows:
        out.setdefault(pid, []).append(name)
    return out


@bp.get("/todos")
def todos_page() -> Any:
    """Todos of owned projects, filtered by ``project``, ``queue`` and ``state``
    (``dead`` for dead letters); newest first."""
    project, queue = request.args.get("project") or "", (request.args.get("queue") or "").strip()
    state = request.args.get("state") or ""
    if state and state not in (*todos.STATES, "dead"):
        raise InvalidArgument(f"state must be one of {', '.join(todos.STATES)} or dead")
    with hub().db.read() as s:
        pids = [owned_project(s, project)] if project else list(g.owned)
        rows: list[Any] = []
        if pids:
            query = select(Todo, Agent.name).outerjoin(Agent, Agent.id == Todo.assigned_agent_id).where(
                Todo.project_id.in_(pids))  # type: ignore[attr-defined]
            if queue:
                query = query.where(Todo.queue == queue)
            if state == "dead":
                query = query.where(in_state(Todo.state, "failed"), Todo.next_retry_at.is_(None))  # type: ignore[union-attr]
            elif state:
                query = query.where(in_state(Todo.state, state))
            rows = s.execute(query.order_by(Todo.created_at.desc(), Todo.id).limit(TODO_PAGE + 1)).all()  # type: ignore[attr-defined]
        agents = _granted_agents(s, list(g.owned)) if g.owned else {}
    shown = []
    for todo, agent in rows[:TODO_PAGE]:
        view = todos.row(todo, g.projects.get(todo.project_id))
        view["assigned"] = agent
        shown.append(view)
    return render_template("ui/todos.html", rows=shown, has_more=len(rows) > TODO_PAGE, agents=agents,
                           filters={"project": project, "queue": queue, "state": state},
                           states=(*todos.STATES, "dead"), page="todos")


def _todo(s: Any, todo_id: str) -> Todo:
    todo = s.get(Todo, todo_id)
    if todo is None or todo.project_id not in g.owned:
        raise NotFound("no such todo")
    return todo  # type: ignore[no-any-return]


@bp.get("/todos/<todo_id>")
def todo_page(todo_id: str) -> Any:
    """One todo: payload (refs, never secret values), result and attempts."""
    with hub().db.read() as s:
        todo = _todo(s, todo_id)
        view = todos.row(todo, g.projects.get(todo.project_id), with_payload=True)
        attempts = todos.attempts_of(s, todo.id)
        names = dict(s.execute(select(Agent.id, Agent.name).where(
            Agent.id.in_({a["agent_id"] for a in attempts} | {todo.assigned_agent_id}))).all())  # type: ignore[attr-defined]
        agents = _granted_agents(s, [todo.project_id]).get(todo.project_id, [])
    for a in attempts:
        a["agent"] = names.get(a["agent_id"], a["agent_id"])
    view["assigned"] = names.get(todo.assigned_agent_id or "")
    return render_template("ui/todo.html", todo=view, attempts=attempts, agents=agents, page="todos",
                           payload=json.dumps(view["payload"], indent=2, sort_keys=True, ensure_ascii=False),
                           result=json.dumps(view["result"], indent=2, sort_keys=True, ensure_ascii=False))


def _agent_for(s: Any, name: str | None, project_id: str) -> str | None:
    """The id of agent ``name`` if it has a ``work`` grant on ``project_id``; ``None`` for no name.

    Raises:
        NotFound: no agent of that name has a work grant there; unknown agents get the same
            answer (as the REST route: no existence oracle, DESIGN.md §5).
    """
    if not name:
        return None
    if name not in _granted_agents(s, [project_id]).get(project_id, []):
        raise NotFound("no agent by that name can work on this project; grant it first")
    return admin.agent_by_name(s, name).id


@bp.post("/todos")
def todo_add() -> Any:
    """Add a todo by hand (``project``, ``title``, ``queue``, ``assign``, ``priority``)."""
    title = todos.check_title(request.form.get("title") or "")
    queue = (request.form.get("queue") or "default").strip()
    admin.check_name("queue", queue)
    raw = (request.form.get("priority") or "0").strip()
    if not re.fullmatch(r"-?[0-9]{1,4}", raw) or not -1000 <= int(raw) <= 1000:
        raise InvalidArgument("priority must be a whole number from -1000 to 1000")
    with write_session() as s:
        pid = owned_project(s, request.form.get("project"))
        agent_id = _agent_for(s, request.form.get("assign"), pid)
        todo, _ = todos.create(s, hub().clock, project_id=pid, queue=queue, kind="manual", title=title,
                               payload=None, human_id=g.human.id)
        todo.priority = int(raw)
        if agent_id is not None:
            todos.assign(s, hub().clock, todo.id, agent_id)
    flash(f"Added {todo.id}")
    return redirect(url_for("ui.todo_page", todo_id=todo.id), code=303)


@bp.post("/todos/<todo_id>/<act>")
def todo_act(todo_id: str, act: str) -> Any:
    """``retry`` a dead letter, ``cancel``, or ``assign`` (form field ``agent``; empty clears)."""
    with write_session() as s:
        todo = _todo(s, todo_id)
        if act == "retry":
            todos.retry_dead_letter(s, hub().clock, todo_id)
        elif act == "cancel":
            todos.cancel(s, hub().clock, todo_id)
        elif act == "assign":
            todos.assign(s, hub().clock, todo_id, _agent_for(s, request.form.get("agent"), todo.project_id))
        else:
            raise NotFound("no such action")
    flash(f"{act.capitalize()}: {todo_id}")
    return redirect(url_for("ui.todo_page", todo_id=todo_id), code=303)


# --- feed ---------------------------------------------------------------------------------------

def _events(s: Any, after: int | None, limit: int) -> list[dict[str, Any]]:
    if not g.owned:
        return []
    query = select(FeedEvent).where(FeedEvent.project_id.in_(g.owned), settled(FeedEvent.id, s))  # type: ignore[attr-defined]
    if after is not None:
        query = query.where(FeedEvent.id > after).order_by(FeedEvent.id).limit(limit)  # type: ignore[operator]
        rows = list(s.execute(query).scalars())[::-1]
    else:
        rows = list(s.execute(query.order_by(FeedEvent.id.desc()).limit(limit)).scalars())  # type: ignore[union-attr]
    out = []
    for e in rows:
        v = event_view(e)
        v["project"] = g.projects.get(e.project_id, e.project_id)
        out.append(v)
    return out


def _newest_id(s: Any) -> int:
    from sqlalchemy import func

    return int(s.execute(select(func.max(FeedEvent.id)).where(settled(FeedEvent.id, s))).scalar() or 0)


@bp.get("/feed")
def feed_page() -> Any:
    """The newest events of owned projects; ``static/ui.js`` keeps it live over ``/api/v1/stream``."""
    with hub().db.read() as s:
        events = _events(s, None, FEED_PAGE)
        since = _newest_id(s)
    return render_template("ui/feed.html", events=events, since=since, page="feed")


@bp.get("/feed/rows")
def feed_rows() -> Any:
    """HTML rows of owned projects' events after ``after`` (newest first), for the live page."""
    after = whole_number(request.args.get("after", ""), 18)
    if after is None:
        raise InvalidArgument("after must be a feed event id")
    with hub().db.read() as s:
        events = _events(s, after, FEED_PAGE)
    return render_template("ui/feed_rows.html", events=events)
