"""REST for humans: the todo operations people do (DESIGN.md §6.2), for projects they own.

``Authorization: Bearer <human token>`` (``switchboard human token NAME``); a todo in a project
the human does not own is the same ``not_found`` as an unknown one.

| route | what |
|---|---|
| ``GET /api/v1/human/todos?project=&state=&dead_letters=1&limit=&cursor=`` | todos of owned projects (paged) |
| ``POST /api/v1/human/todos`` (``project``, ``title``, ``queue?``, ``assign?``, ``priority?``) | add a todo |
| ``POST /api/v1/human/todos/<id>/retry`` | dead letter back to pending, fresh attempt budget |
| ``POST /api/v1/human/todos/<id>/cancel`` | withdraw a todo |
| ``POST /api/v1/human/todos/<id>/assign`` (``agent``) | assign a pending todo to an agent |
| ``GET /api/v1/human/quarantine?project=&limit=&cursor=`` | quarantined deliveries of owned projects (paged) |
| ``POST /api/v1/human/quarantine/<id>/release`` (``as_self?``) | process again, once |
| ``POST /api/v1/human/quarantine/<id>/discard`` | drop it and its body |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, jsonify, request
from sqlalchemy import select

from switchboard import admin
from switchboard.errors import InvalidArgument, NotFound
from switchboard.intake import json_shape
from switchboard.mcp_server.callers import bearer
from switchboard.models import Project, Todo
from switchboard.queue import todos
from switchboard.web import rest_calls, schemas

if TYPE_CHECKING:
    from sqlmodel import Session


bp = Blueprint("rest_human_work", __name__, url_prefix="/api/v1/human")




def _owned(session: Session) -> list[str]:
    human = admin.authenticate_human(session, bearer(request.headers.get("Authorization")))
    return admin.owned_projects(session, human.id)


def _body() -> dict[str, Any]:
    return json_shape.loads_object(request.get_data())


def _todo(session: Session, owned: list[str], todo_id: str) -> Todo:
    todo = session.get(Todo, todo_id)
    if todo is None or todo.project_id not in owned:
        raise NotFound("no such todo")
    return todo


@bp.get("/todos")
def list_todos() -> Any:
    """One page of the todos of the projects the human owns, oldest first (``?project=&state=
    &dead_letters=&limit=&cursor=``); ``next_cursor`` continues (:func:`todos.page_of`)."""
    args = schemas.query_args(schemas.TodoQuery(), request.args)
    with rest_calls.hub().db.read() as s:
        owned = _narrow(s, _owned(s), args.get("project"))
        return jsonify(todos.page_of(s, owned, state=args.get("state"), dead_letters=args.get("dead_letters", False),
                                     limit=args.get("limit", 50), cursor=args.get("cursor")))


def _narrow(session: Session, owned: list[str], project: str | None) -> list[str]:
    """``owned``, or just ``project`` (id or name) when given; a project not owned is ``not_found``."""
    if project is None:
        return owned
    pid = session.execute(select(Project.id).where((Project.id == project) | (Project.name == project))).scalar()
    if pid not in owned:
        raise NotFound("no such project")
    return [pid]


@bp.post("/todos")
def add_todo() -> Any:
    body = _body()
    title = todos.check_title(body.get("title"))
    # Types first: an object for "project" reached the database driver, a 500 (a review).
    if not isinstance(body.get("project"), str):
        raise InvalidArgument("project (a project name or id) is required")
    if body.get("assign") is not None and not isinstance(body["assign"], str):
        raise InvalidArgument("assign must be an agent's name")
    queue = body.get("queue", "default")
    admin.check_name("queue", queue)
    priority = body.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool) or not -1000 <= priority <= 1000:
        raise InvalidArgument("priority must be a whole number from -1000 to 1000")
    hub = rest_calls.hub()
    with hub.db.write() as s:
        owned = _owned(s)
        project = s.execute(select(Project).where(
            (Project.id == body.get("project")) | (Project.name == body.get("project")))).scalars().first()
        if project is None or project.id not in owned:
            raise NotFound("no such project")
        agent_id = None
        if body.get("assign") is not None:
            agent_id = admin.assignable_agent(s, body["assign"], project.id).id
        todo, _ = todos.create(s, hub.clock, project_id=project.id, queue=queue, kind="manual", title=title,
                               payload=None)
        todo.priority, todo.assigned_agent_id = priority, agent_id
        return jsonify(todos.row(todo)), 201


@bp.post("/todos/<todo_id>/<action>")
def act(todo_id: str, action: str) -> Any:
    hub = rest_calls.hub()
    body = _body()
    with hub.db.write() as s:
        owned = _owned(s)
        _todo(s, owned, todo_id)
        if action == "retry":
            return jsonify(todos.retry_dead_letter(s, hub.clock, todo_id))
        if action == "cancel":
            return jsonify(todos.cancel(s, hub.clock, todo_id))
        if action == "assign":
            if not isinstance(body.get("agent"), str):
                raise InvalidArgument("agent (the agent's name) is required")
            todo_row = _todo(s, owned, todo_id)
            todo = todos.assign(s, hub.clock, todo_id,
                                admin.assignable_agent(s, body["agent"], todo_row.project_id).id)
            return jsonify(todos.row(todo))
        raise InvalidArgument(f"unknown action {action!r}; one of retry, cancel, assign")


@bp.get("/quarantine")
def list_quarantine() -> Any:
    """One page of quarantined deliveries of the projects the human owns, oldest first
    (``?project=&limit=&cursor=``); ``next_cursor`` continues."""
    from switchboard.intake import quarantine

    args = schemas.query_args(schemas.QuarantineQuery(), request.args)
    with rest_calls.hub().db.read() as s:
        owned = _narrow(s, _owned(s), args.get("project"))
        return jsonify(quarantine.page_quarantined(s, owned, limit=args.get("limit", 100), cursor=args.get("cursor")))


@bp.post("/quarantine/<delivery_id>/<action>")
def act_on_quarantine(delivery_id: str, action: str) -> Any:
    """``release`` (processed again, once; ``{"as_self": true}`` answers for an unknown sender)
    or ``discard`` a quarantined delivery of a project the human owns."""
    from switchboard.intake import quarantine
    from switchboard.models import Delivery
    from switchboard.queue.jobs import process_delivery

    if action not in ("release", "discard"):
        raise InvalidArgument(f"unknown action {action!r}; one of release, discard")
    body = _body()
    if not isinstance(body.get("as_self", False), bool):  # "yes" was read as false: a 409 (a new-user run)
        raise InvalidArgument("as_self must be true or false")
    hub = rest_calls.hub()
    with hub.db.write() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        delivery = s.get(Delivery, delivery_id)
        if delivery is None or delivery.project_id not in admin.owned_projects(s, human.id):
            raise NotFound("no such delivery")
        if action == "discard":
            quarantine.discard(s, hub.clock, delivery_id)
            return jsonify({"id": delivery_id, "status": "discarded"})
        quarantine.release(s, hub.clock, delivery_id, human.id if body.get("as_self") is True else None)
    status = process_delivery(hub, delivery_id)
    with hub.db.read() as s:
        d = s.get(Delivery, delivery_id)
        return jsonify({"id": delivery_id, "status": status, "todo_id": d.todo_id if d else None})
