"""Standing interests in feed events: ``notify_subscribe`` / ``notify_unsubscribe`` (DESIGN.md §6.4).

A subscription names known kinds and optionally one project (id or name). It is seeded at the
newest matching event (no history replay): for a project-scoped one, the newest of those kinds
in that project; for an unscoped one, the newest of those kinds in the projects the agent may
read at that moment (never another project's: its activity must not move the agent's cursor,
issue 13 item 10).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select
from sqlmodel import Session

from switchboard.clock import Clock, iso
from switchboard.errors import InvalidArgument, NotFound
from switchboard.feed.events import KINDS, settled
from switchboard.models import AgentCursor, FeedEvent, Subscription
from switchboard.models.base import new_id
from switchboard.scope import resolve_projects

MAX_SUBSCRIPTIONS = 50


def subscribe(session: Session, clock: Clock, agent_id: str, grants: dict[str, str], kinds: list[str],
              project: str | None = None) -> dict[str, Any]:
    """Create a subscription.

    Returns:
        ``{subscription_id, cursor, kinds, project_id, created_at}``; ``cursor`` is the seed.

    Raises:
        InvalidArgument: empty or unknown kinds, or over :data:`MAX_SUBSCRIPTIONS`.
        NotFound: ``project`` is unknown or not readable.
    """
    wanted = sorted(set(kinds or []))
    if not wanted:
        raise InvalidArgument("kinds must name at least one feed event kind")
    unknown = [k for k in wanted if k not in KINDS]
    if unknown:
        raise InvalidArgument(f"unknown kind(s): {', '.join(unknown)}")
    project_id = resolve_projects(session, grants, project, need_work=False)[0] if project else None
    count = session.execute(select(func.count(func.distinct(Subscription.id)))
                            .where(Subscription.agent_id == agent_id)).scalar() or 0
    if count >= MAX_SUBSCRIPTIONS:
        raise InvalidArgument(f"at most {MAX_SUBSCRIPTIONS} subscriptions per agent; remove one first")
    # Seed only from projects the agent may read, so the returned cursor never moves with
    # another project's activity (issue 13 item 10), and among settled events only: one
    # committing late below the seed would be skipped.
    readable = [project_id] if project_id is not None else list(grants)
    seed = 0
    if readable:
        seed_q = select(func.max(FeedEvent.id)).where(FeedEvent.kind.in_(wanted),  # type: ignore[attr-defined]
                                                      FeedEvent.project_id.in_(readable),  # type: ignore[attr-defined]
                                                      settled(FeedEvent.id, session))
        seed = int(session.execute(seed_q).scalar() or 0)
    sub_id, now = new_id("sub"), clock.now()
    for kind in wanted:
        session.add(Subscription(id=sub_id, kind=kind, agent_id=agent_id, project_id=project_id,
                                 seed_event_id=seed, created_at=now))
    session.flush()
    return {"subscription_id": sub_id, "cursor": seed, "kinds": wanted, "project_id": project_id,
            "created_at": iso(now)}


def unsubscribe(session: Session, agent_id: str, subscription_id: str) -> dict[str, Any]:
    """Remove one of the agent's subscriptions and its cursors.

    Raises:
        NotFound: unknown id, or another agent's (the same answer).
    """
    result = session.execute(delete(Subscription).where(Subscription.id == subscription_id,
                                                        Subscription.agent_id == agent_id))
    if not result.rowcount:
        raise NotFound("no such subscription")
    session.execute(delete(AgentCursor).where(AgentCursor.agent_id == agent_id,
                                              AgentCursor.stream == subscription_id))
    return {"subscription_id": subscription_id, "removed": True}


def list_of(session: Session, agent_id: str) -> list[dict[str, Any]]:
    """The agent's subscriptions: ``[{subscription_id, kinds, project_id, cursor}]``."""
    rows = session.execute(select(Subscription).where(Subscription.agent_id == agent_id)
                           .order_by(Subscription.created_at, Subscription.id, Subscription.kind)).scalars()
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = out.setdefault(r.id, {"subscription_id": r.id, "kinds": [], "project_id": r.project_id,
                                      "cursor": r.seed_event_id})
        entry["kinds"].append(r.kind)
    return list(out.values())
