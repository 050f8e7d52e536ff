"""Ending access: revoke tokens, remove grants, remove agents (issue 13 item 3).

Each operation takes a write session and takes effect for the next request at once (every
request resolves its token and grants afresh). Open agent streams and ``/mcp`` sessions opened
with a revoked token are closed by the server's watcher
(:class:`switchboard.web.revocation_watch.RevocationWatch`, within a second), in this process
or any other sharing the database.

``owner_human_id``: when given (REST, a human acting), the agent must belong to that human;
another human's agent is the same ``not_found`` as an unknown one (DESIGN.md §5). The CLI is
the operator and passes ``None``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import NotFound
from switchboard.models import Agent, Grant, HumanToken, ProjectOwner, Subscription, Todo, Token, in_state


def _agent(session: Session, name: object, owner_human_id: str | None) -> Agent:
    agent = (session.execute(select(Agent).where(Agent.name == name)).scalars().first()
             if isinstance(name, str) else None)
    if agent is None or agent.removed_at is not None or (
            owner_human_id is not None and agent.human_id != owner_human_id):
        raise NotFound("no such agent")
    return agent


def revoke_agent_tokens(session: Session, clock: Clock, agent_name: object, token_id: str | None = None,
                        owner_human_id: str | None = None) -> list[str]:
    """Revoke one token (``token_id``) or every live token of an agent.

    Returns:
        The ids of the tokens revoked now (empty when they were revoked already).

    Raises:
        NotFound: no such agent (or not the human's), or ``token_id`` is not one of its tokens.
    """
    agent = _agent(session, agent_name, owner_human_id)
    return _revoke(session, clock, Token, Token.agent_id, agent.id, token_id)


def revoke_human_tokens(session: Session, clock: Clock, human_id: str, token_id: str | None = None) -> list[str]:
    """Revoke one or every live API token of a human.

    Raises:
        NotFound: ``token_id`` is not one of the human's tokens.
    """
    return _revoke(session, clock, HumanToken, HumanToken.human_id, human_id, token_id)


def _revoke(session: Session, clock: Clock, table: Any, owner_col: Any, owner_id: str,
            token_id: str | None) -> list[str]:
    query = select(table.id, table.revoked_at).where(owner_col == owner_id)
    if token_id is not None:
        query = query.where(table.id == token_id)
    rows = session.execute(query).all()
    if token_id is not None and not rows:
        raise NotFound("no such token")
    live = [tid for tid, revoked in rows if revoked is None]
    if live:
        session.execute(update(table).where(table.id.in_(live)).values(revoked_at=clock.now()))
    return live


def list_tokens(session: Session, table: Any, owner_col: Any, owner_id: str) -> list[dict[str, Any]]:
    """``[{id, created_at, revoked_at}]`` of a principal's tokens (never a token or digest)."""
    rows = session.execute(select(table).where(owner_col == owner_id).order_by(table.created_at)).scalars()
    return [{"id": r.id, "created_at": r.created_at.isoformat(),
             "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None} for r in rows]


def revoke_grant(session: Session, agent_name: object, project_name: object,
                 acting_human_id: str | None = None) -> dict[str, Any]:
    """Remove an agent's grant on a project; its pending todos assigned there are unassigned.

    A human may revoke a grant of their own agent, or any grant on a project they own (either
    side of a friendship can end it, DESIGN.md §6.6).

    Raises:
        NotFound: no such agent, project or grant, or none the acting human may touch (one answer).
    """
    agent = session.execute(select(Agent).where(Agent.name == agent_name)).scalars().first() \
        if isinstance(agent_name, str) else None
    project = None
    if isinstance(project_name, str):
        from switchboard.models import Project

        project = session.execute(select(Project).where(
            (Project.name == project_name) | (Project.id == project_name))).scalars().first()
    row = None if agent is None or project is None else session.execute(
        select(Grant).where(Grant.agent_id == agent.id, Grant.project_id == project.id)).scalars().first()
    if row is not None and acting_human_id is not None and agent is not None and agent.human_id != acting_human_id:
        owns = session.execute(select(ProjectOwner.id).where(
            ProjectOwner.project_id == row.project_id, ProjectOwner.human_id == acting_human_id)).first()
        if owns is None:
            row = None
    if row is None or agent is None or project is None:
        raise NotFound("no such grant")
    session.delete(row)
    _unassign(session, agent.id, project.id)
    session.flush()
    return {"agent": agent.name, "project": project.name, "revoked": True}


def _unassign(session: Session, agent_id: str, project_id: str | None) -> None:
    query = update(Todo).where(Todo.assigned_agent_id == agent_id, in_state(Todo.state, "pending"))
    if project_id is not None:
        query = query.where(Todo.project_id == project_id)
    # Unassigned work is rung again to whoever may take it.
    session.execute(query.values(assigned_agent_id=None, rung_at=None, ring_count=0)
                    .execution_options(synchronize_session=False))


def remove_agent(session: Session, clock: Clock, agent_name: object,
                 owner_human_id: str | None = None) -> dict[str, Any]:
    """Remove an agent: revoke its tokens, delete its grants and subscriptions, unassign its
    pending todos, and mark it removed (no token can be vended for it again). The row stays,
    so attempts and inbox items keep naming who did what.

    Raises:
        NotFound: no such agent (or not the human's).
    """
    agent = _agent(session, agent_name, owner_human_id)
    revoked = _revoke(session, clock, Token, Token.agent_id, agent.id, None)
    session.execute(delete(Grant).where(Grant.agent_id == agent.id))
    session.execute(delete(Subscription).where(Subscription.agent_id == agent.id))
    _unassign(session, agent.id, None)
    agent.removed_at = clock.now()
    session.flush()
    return {"agent": agent.name, "removed": True, "tokens_revoked": len(revoked)}

