"""``todo_create``: an agent creates work, on its own projects or a friend's queues (DESIGN.md §6.6).

Allowed on ``(project, queue)`` when the agent has ``work`` on the project, or an active
friendship grants exactly that queue (then the todo is assigned to the friend's agent, the only
one it may reach). The title and body are untrusted text like a delivery's: the channel-break
rule refuses a tag (also in the wake line as it will be sent), and secret values become refs,
sealed in the vault under the project. The todo records who asked (``human_id``, the payload's
``requested_by``) and its title says so; the target agent is woken after the commit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from switchboard import admin
from switchboard.clock import Clock
from switchboard.errors import Forbidden, InvalidArgument, NotFound
from switchboard.friends.requests import active_grant, has_any_grant_on
from switchboard.intake import vault
from switchboard.intake.screening import wake_content
from switchboard.intake.untrusted import screen_texts
from switchboard.models import Agent, Grant, Human, Project
from switchboard.notify.wakes import Wake, ring
from switchboard.queue import todos
from switchboard.text import readable

MAX_TITLE_CHARS = todos.MAX_TITLE_CHARS
MAX_BODY_CHARS = 20_000
KIND = "agent.todo"


def create(session: Session, clock: Clock, key_ring: Any, *, agent_id: str, project: str, queue: str,
           title: str, body: str | None = None, assign: str | None = None,
           priority: int = 0) -> tuple[dict[str, Any], Wake]:
    """Create a pending todo for another agent (or this one), screened like a delivery.

    Args:
        key_ring: the vault key ring (refs of secret values are sealed under the project).
        project: name or id. queue: the queue name.
        assign: an agent name; on a friend's queue only the friend's agent.
        priority: -1000..1000.

    Returns:
        ``(todo row with payload, wake)``; publish the wake after the commit.

    Raises:
        NotFound: a project the agent neither works on nor has a friendship on (one answer).
        Forbidden: a read-only grant, or a friend's queue the friendship does not grant
            (revoked friendships grant nothing).
        InvalidArgument: bad title, body, queue, priority, assignee, or a ``<channel>`` tag.
    """
    admin.check_name("queue", queue)
    if not isinstance(priority, int) or isinstance(priority, bool) or not -1000 <= priority <= 1000:
        raise InvalidArgument("priority must be a whole number from -1000 to 1000")
    line = readable(str(title))  # one line, nothing hidden (bidi, controls): DESIGN.md §5
    if not line or len(line) > MAX_TITLE_CHARS:  # todos.check_title's rule; <channel> is screened below
        raise InvalidArgument(f"title must be 1-{MAX_TITLE_CHARS} characters on one line")
    if body is not None and len(body) > MAX_BODY_CHARS:
        raise InvalidArgument(f"body must be at most {MAX_BODY_CHARS} characters")
    me = session.get(Agent, agent_id)
    found = session.execute(select(Project).where((Project.id == project) | (Project.name == project))).scalars().first()
    if me is None or found is None:
        raise NotFound("no such project")
    role = session.execute(select(Grant.role).where(Grant.agent_id == agent_id,
                                                    Grant.project_id == found.id)).scalar()
    friendship = None
    assignee: Agent | None = None
    if role == "work":
        if assign is not None:
            assignee = session.execute(select(Agent).where(Agent.name == assign)).scalars().first()
            works = assignee is not None and session.execute(select(Grant.id).where(
                Grant.agent_id == assignee.id, Grant.project_id == found.id, Grant.role == "work")).first()
            if not works:
                raise InvalidArgument("assign must name an agent with work on the project")
    else:
        friendship = active_grant(session, agent_id, found.id, queue)
        if friendship is None:
            if has_any_grant_on(session, agent_id, found.id):
                raise Forbidden(f"no friendship grants queue {queue} of that project")
            if role == "read":
                raise Forbidden("this agent has read access only on that project")
            raise NotFound("no such project")
        assignee = session.get(Agent, friendship.to_agent_id)
        if assign is not None and (assignee is None or assign != assignee.name):
            raise InvalidArgument("on a friend's queue a todo goes to the friend's agent only")
    human = session.get(Human, me.human_id)
    asked = f"{me.name} ({human.name if human else 'unknown human'}) asks: {line}"[:500]
    screened = screen_texts({"title": asked, "body": body}, joined=wake_content(queue, asked))
    payload: dict[str, Any] = {
        "body": screened.texts["body"],
        "requested_by": {"agent_id": me.id, "agent": me.name, "human_id": me.human_id,
                         "human": human.name if human else None},
    }
    if friendship is not None:
        payload["friendship_id"] = friendship.id
    now = clock.now()
    todo, _ = todos.create(session, clock, project_id=found.id, queue=queue, kind=KIND,
                           title=str(screened.texts["title"]), payload=payload, human_id=me.human_id)
    todo.priority = priority
    todo.assigned_agent_id = assignee.id if assignee is not None else None
    if screened.refs:
        vault.store(session, key_ring, found.id, None, screened.refs, now)
    wake = ring(session, clock, todo)
    out = todos.row(todo, found.name, with_payload=True)
    out["requested_by"] = payload["requested_by"]
    return out, wake
