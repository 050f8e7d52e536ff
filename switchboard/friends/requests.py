"""Friend requests: an agent asks to send work to another human's agent (DESIGN.md §6.6).

``request`` stores a pending :class:`~switchboard.models.FriendRequest` (it grants nothing) and a
``friend`` inbox item for the target agent's human. The request is approved, creating a
:class:`~switchboard.models.Friendship` on exactly the requested queues, in one of two ways:

1. the target human decides the ``friend`` item ``approve`` (CLI ``inbox decide``, REST, web):
   :func:`on_item_resolved` approves it at once; ``deny`` declines it;
2. the target agent calls ``friend_respond(request_id, "approve")`` and Claude Code relays that
   call's permission prompt; the human's ``allow`` is the decision. :func:`respond` accepts it
   only when a ``permission`` item relayed by the calling agent's own session, for a tool whose
   name ends in ``friend_respond``, whose ``input_preview`` names the request id, was allowed by
   the target human, is not older than ``permission_expiry_seconds`` and was never used; it is
   then used. Anything else is ``human_approval_required``.

Declining needs no human. Either human (or either agent, for its human) can revoke a friendship;
from that moment ``todo_create`` refuses its queues.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select
from sqlmodel import Session

from switchboard import admin
from switchboard.clock import Clock, iso
from switchboard.errors import Conflict, HumanApprovalRequired, InvalidArgument, NotFound
from switchboard.feed import events as feed
from switchboard.inbox import permissions
from switchboard.inbox.items import one_line, resolve
from switchboard.models import Agent, FriendRequest, Friendship, Grant, Human, InboxItem, Project

MAX_QUEUES = 20
MAX_REASON_CHARS = 2_000
RESPOND_TOOL = "friend_respond"


def _agent(session: Session, name_or_id: str) -> Agent | None:
    return session.execute(select(Agent).where((Agent.id == name_or_id) | (Agent.name == name_or_id))).scalars().first()


NO_TARGET = "no such agent, or it takes no work on those queues"
"""One answer for an unknown agent and for queues it does not work on: no existence oracle
(DESIGN.md §5): a requester learns nothing of other humans' agents or projects from it."""


def _queue_names(queues: Any) -> list[tuple[str, str]]:
    """``["project/queue", ...]`` → ``[(project, queue)]``, checked for form only.

    Raises:
        InvalidArgument: a malformed entry, a repeat, or not 1-MAX_QUEUES entries.
    """
    if not isinstance(queues, list) or not 1 <= len(queues) <= MAX_QUEUES:
        raise InvalidArgument(f"queues must list 1-{MAX_QUEUES} entries of the form project/queue")
    out: list[tuple[str, str]] = []
    for entry in queues:
        if not isinstance(entry, str) or entry.count("/") != 1:
            raise InvalidArgument("each queue is written project/queue, e.g. acme/reviews")
        project, queue = entry.split("/")
        admin.check_name("queue", queue)
        if (project, queue) in out:
            raise InvalidArgument(f"{entry} is listed twice")
        out.append((project, queue))
    return out


def _queues(session: Session, to_agent_id: str, names: list[tuple[str, str]]) -> list[dict[str, str]]:
    """``[(project, queue)]`` → ``[{project_id, queue}]`` in projects the target agent works on.

    Raises:
        NotFound: a project the target agent does not work on (:data:`NO_TARGET`, the same
            answer as an unknown agent).
    """
    out: list[dict[str, str]] = []
    for project, queue in names:
        pid = session.execute(select(Project.id).where((Project.id == project) | (Project.name == project))).scalar()
        works = pid is not None and session.execute(select(Grant.id).where(
            Grant.agent_id == to_agent_id, Grant.project_id == pid, Grant.role == "work")).first() is not None
        if not works:
            raise NotFound(NO_TARGET)
        pair = {"project_id": str(pid), "queue": queue}
        if pair in out:
            raise NotFound(NO_TARGET)  # two spellings of one project: as unknown, never a hint
        out.append(pair)
    return out


def _named(session: Session, pairs: list[dict[str, str]]) -> list[str]:
    names = dict(session.execute(select(Project.id, Project.name).where(
        Project.id.in_({p["project_id"] for p in pairs}))).all())  # type: ignore[attr-defined]
    return [f"{names.get(p['project_id'], p['project_id'])}/{p['queue']}" for p in pairs]


def request_view(session: Session, fr: FriendRequest) -> dict[str, Any]:
    """The public shape of a request."""
    agents = dict(session.execute(select(Agent.id, Agent.name).where(
        Agent.id.in_([fr.from_agent_id, fr.to_agent_id]))).all())  # type: ignore[attr-defined]
    return {"request_id": fr.id, "from_agent": agents.get(fr.from_agent_id), "to_agent": agents.get(fr.to_agent_id),
            "queues": _named(session, fr.queues), "reason": fr.reason, "status": fr.status,
            "inbox_item_id": fr.inbox_item_id, "decided_via": fr.decided_via, "decided_at": iso(fr.decided_at),
            "created_at": iso(fr.created_at)}


def friendship_view(session: Session, fs: Friendship) -> dict[str, Any]:
    """The public shape of a friendship."""
    agents = dict(session.execute(select(Agent.id, Agent.name).where(
        Agent.id.in_([fs.from_agent_id, fs.to_agent_id]))).all())  # type: ignore[attr-defined]
    humans = dict(session.execute(select(Human.id, Human.name).where(
        Human.id.in_([fs.from_human_id, fs.to_human_id]))).all())  # type: ignore[attr-defined]
    return {"friendship_id": fs.id, "request_id": fs.request_id, "from_agent": agents.get(fs.from_agent_id),
            "from_human": humans.get(fs.from_human_id), "to_agent": agents.get(fs.to_agent_id),
            "to_human": humans.get(fs.to_human_id), "queues": _named(session, fs.queues),
            "approved_via": fs.approved_via, "created_at": iso(fs.created_at),
            "active": fs.revoked_at is None, "revoked_at": iso(fs.revoked_at)}


def request(session: Session, clock: Clock, *, agent_id: str, to_agent: str, queues: list[str],
            reason: str) -> dict[str, Any]:
    """``friend_request``: a pending request (no grant) and a ``friend`` item for the target human.

    Args:
        agent_id: the requesting agent.
        to_agent: the target agent's name (or id); it must belong to another human.
        queues: ``project/queue`` entries in projects the target agent works on.
        reason: why, shown to the target human (one line, screened like a title).

    Returns:
        ``{request_id: "fr_...", status: "pending", inbox_item_id, ...}``.

    Raises:
        NotFound: unknown target agent or queue. InvalidArgument: same human, bad queues or reason.
        Conflict: a pending request for the same target is already open.
    """
    # Form first, then existence: every refusal that depends on another human's agents or
    # projects is the one NO_TARGET answer (DESIGN.md §5).
    names = _queue_names(queues)
    line = one_line("reason", reason, MAX_REASON_CHARS)
    me = session.get(Agent, agent_id)
    target = _agent(session, to_agent) if isinstance(to_agent, str) else None
    if me is None or target is None:
        raise NotFound(NO_TARGET)
    if target.human_id == me.human_id:
        raise InvalidArgument("that agent belongs to your own human: ask them for a grant instead")
    if session.execute(select(FriendRequest.id).where(
            FriendRequest.from_agent_id == me.id, FriendRequest.to_agent_id == target.id,
            FriendRequest.status == "pending")).first() is not None:
        raise Conflict("a request to that agent is already pending")  # the caller's own request: no news
    pairs = _queues(session, target.id, names)
    now = clock.now()
    fr = FriendRequest(from_agent_id=me.id, to_agent_id=target.id, from_human_id=me.human_id,
                       to_human_id=target.human_id, queues=pairs, reason=line, created_at=now)
    session.add(fr)
    session.flush()
    named = ", ".join(_named(session, pairs))
    title = one_line("title", f"{me.name} asks to send work to {target.name} on {named}", 300)
    item = InboxItem(kind="friend", project_id=None, agent_id=target.id, human_id=target.human_id, title=title,
                     body=line, on_expiry="expire", created_at=now, subject_id=fr.id)
    session.add(item)
    session.flush()
    fr.inbox_item_id = item.id
    event = feed.append(session, clock, None, "friend.requested", f"Friend request {fr.id}: {title}",
                        subject_id=fr.id, data={"request_id": fr.id, "inbox_item_id": item.id,
                                                "from_agent_id": me.id, "to_agent_id": target.id})
    item.seq = int(event.id or 0)
    session.flush()
    return request_view(session, fr)


def _approve(session: Session, clock: Clock, fr: FriendRequest, human_id: str, via: str) -> Friendship:
    now = clock.now()
    fr.status, fr.decided_by_human_id, fr.decided_via, fr.decided_at = "approved", human_id, via, now
    fs = Friendship(request_id=fr.id, from_agent_id=fr.from_agent_id, to_agent_id=fr.to_agent_id,
                    from_human_id=fr.from_human_id, to_human_id=fr.to_human_id, queues=fr.queues,
                    approved_by_human_id=human_id, approved_via=via, created_at=now)
    session.add(fs)
    session.flush()
    return fs


def on_item_resolved(session: Session, clock: Clock, item: InboxItem) -> None:
    """A ``friend`` item was decided (or expired): approve, decline or expire its pending request.

    A human's ``approve`` is the decision itself; it is recorded as used at once.
    """
    fr = session.get(FriendRequest, item.subject_id) if item.subject_id else None
    if fr is None or fr.status != "pending":
        return
    if item.status == "decided" and item.decision == "approve" and item.resolved_by_human_id == fr.to_human_id:
        _approve(session, clock, fr, fr.to_human_id, str(item.resolved_via))
        item.used_at = clock.now()
    elif item.status == "decided":
        fr.status, fr.decided_by_human_id = "declined", item.resolved_by_human_id
        fr.decided_via, fr.decided_at = item.resolved_via, clock.now()
    else:
        fr.status, fr.decided_at = "expired", clock.now()


def respond(session: Session, clock: Clock, *, agent_id: str, session_id: str | None, request_id: str,
            decision: str, ttl_seconds: int) -> dict[str, Any]:
    """``friend_respond``: the target agent approves (with a bound human decision) or declines.

    Returns:
        ``{request: ..., friendship: ... | None}``.

    Raises:
        NotFound: unknown request, or one addressed to another agent (the same answer).
        Conflict: the request is no longer pending.
        HumanApprovalRequired: ``approve`` without a usable human decision (see the module).
        InvalidArgument: ``decision`` is not ``approve`` or ``decline``.
    """
    if decision not in ("approve", "decline"):
        raise InvalidArgument("decision must be approve or decline")
    fr = session.get(FriendRequest, request_id) if isinstance(request_id, str) else None
    if fr is None or fr.to_agent_id != agent_id:
        raise NotFound("no such friend request")
    if fr.status != "pending":
        raise Conflict(f"the request is already {fr.status}")
    item = session.get(InboxItem, fr.inbox_item_id) if fr.inbox_item_id else None
    if decision == "decline":
        fr.status, fr.decided_via, fr.decided_at = "declined", "agent", clock.now()
        if item is not None and item.status == "open":
            resolve(session, clock, item.id, via="agent", expired=True, note="declined by the agent")
        return {"request": request_view(session, fr), "friendship": None}
    allowed = permissions.usable_approval(session, clock, agent_id=agent_id, session_id=session_id,
                                          human_id=fr.to_human_id, tool_suffix=RESPOND_TOOL, mentions=fr.id,
                                          ttl_seconds=ttl_seconds)
    if allowed is None or not permissions.use(session, clock, allowed):
        hint = (f"your human can approve inbox item {fr.inbox_item_id} (`switchboard inbox decide "
                f"{fr.inbox_item_id} approve`, REST or the web UI)" if fr.inbox_item_id else "your human must approve")
        raise HumanApprovalRequired(
            f"approving {fr.id} needs your human's decision: {hint}, or call friend_respond through the "
            "Switchboard channel in Claude Code and have them allow the relayed permission prompt")
    fs = _approve(session, clock, fr, fr.to_human_id, "relay")
    if item is not None and item.status == "open":
        resolve(session, clock, item.id, via="relay", human_id=fr.to_human_id, decision="approve",
                note=f"allowed through permission prompt {allowed.request_id}")
        item.used_at = clock.now()
    return {"request": request_view(session, fr), "friendship": friendship_view(session, fs)}


def list_for_agent(session: Session, agent_id: str) -> dict[str, Any]:
    """``friend_list``: the agent's friendships and its requests, sent and received, newest first."""
    fss = session.execute(select(Friendship).where(
        or_(Friendship.from_agent_id == agent_id, Friendship.to_agent_id == agent_id))
        .order_by(Friendship.created_at.desc()).limit(200)).scalars().all()  # type: ignore[attr-defined]
    frs = session.execute(select(FriendRequest).where(
        or_(FriendRequest.from_agent_id == agent_id, FriendRequest.to_agent_id == agent_id))
        .order_by(FriendRequest.created_at.desc()).limit(200)).scalars().all()  # type: ignore[attr-defined]
    return {"friendships": [friendship_view(session, f) for f in fss],
            "requests": [request_view(session, r) for r in frs]}


def list_for_human(session: Session, human_id: str | None) -> list[dict[str, Any]]:
    """Friendships where ``human_id`` is on either side (all when ``None``), newest first."""
    query = select(Friendship)
    if human_id is not None:
        query = query.where(or_(Friendship.from_human_id == human_id, Friendship.to_human_id == human_id))
    rows = session.execute(query.order_by(Friendship.created_at.desc()).limit(500)).scalars().all()  # type: ignore[attr-defined]
    return [friendship_view(session, f) for f in rows]


def revoke(session: Session, clock: Clock, friendship_id: str, *, human_id: str) -> dict[str, Any]:
    """Revoke a friendship for ``human_id`` (either side's human; an agent revokes for its human).

    Raises:
        NotFound: unknown, or not a friendship of that human (the same answer).
        Conflict: already revoked.
    """
    fs = session.get(Friendship, friendship_id) if isinstance(friendship_id, str) else None
    if fs is None or human_id not in (fs.from_human_id, fs.to_human_id):
        raise NotFound("no such friendship")
    if fs.revoked_at is not None:
        raise Conflict("the friendship is already revoked")
    fs.revoked_at, fs.revoked_by_human_id = clock.now(), human_id
    feed.append(session, clock, None, "friend.decided", f"Friendship {fs.id} revoked", subject_id=fs.request_id,
                data={"friendship_id": fs.id, "request_id": fs.request_id, "status": "revoked"})
    session.flush()
    return friendship_view(session, fs)


def _live_friendships(session: Session, agent_id: str, project_id: str) -> list[Friendship]:
    """``agent_id``'s unrevoked friendships whose target agent still has ``work`` on
    ``project_id``: a friendship never outlives the target's own grant (the target human
    revoking that grant stops the work that flowed through it, at once)."""
    return list(session.execute(
        select(Friendship).join(Grant, (Grant.agent_id == Friendship.to_agent_id) & (Grant.project_id == project_id)
                                & (Grant.role == "work"))
        .where(Friendship.from_agent_id == agent_id, Friendship.revoked_at.is_(None))  # type: ignore[union-attr]
    ).scalars().all())


def active_grant(session: Session, agent_id: str, project_id: str, queue: str) -> Friendship | None:
    """The active friendship letting ``agent_id`` create todos on ``(project_id, queue)``, if any."""
    for fs in _live_friendships(session, agent_id, project_id):
        if {"project_id": project_id, "queue": queue} in fs.queues:
            return fs
    return None


def has_any_grant_on(session: Session, agent_id: str, project_id: str) -> bool:
    """True when an active friendship of ``agent_id`` names ``project_id`` (for the error code)."""
    return any(p["project_id"] == project_id for fs in _live_friendships(session, agent_id, project_id)
               for p in fs.queues)



