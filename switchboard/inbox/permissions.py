"""Permission prompts relayed from Claude Code, and their verdicts (DESIGN.md §6.5, §6.5a).

The channel adapter forwards each ``notifications/claude/channel/permission_request``
(``{request_id, tool_name, description, input_preview}``) to the hub with its own session id.
:func:`relay` stores it as an inbox item of kind ``permission`` for the agent's human, bound to
that session. The texts come from Claude Code and are untrusted: they are screened like a
delivery (:mod:`switchboard.intake.untrusted`: a ``<channel>`` break refuses the prompt, secret
values become refs) before they are stored or shown. A prompt has no project, so the values
behind its refs are dropped rather than vaulted: the agent that relayed it holds them already.

A human decides it like any item (:func:`switchboard.inbox.items.resolve`: CLI, REST, web, or a
chat verdict); the first decision wins (a second is a ``conflict``). In the same transaction
:func:`verdict_event` writes ONE durable agent-stream event ``verdict`` ``{request_id,
behavior}`` targeted at the relaying session (:mod:`switchboard.notify.sessions`): only that
session's stream reads it, once, and a stream resumed with ``Last-Event-ID`` after a hub
restart gets it then. ``verdict_state`` says where it stands: ``sent`` (the session was
attached), ``queued`` (it was not: it gets the verdict if it re-attaches) or ``session_gone``
(the adapter reported its session closed: :func:`close_session` expires its open prompts, and
nothing is sent anywhere else).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument, NotFound
from switchboard.feed import events as feed
from switchboard.inbox.items import resolve, view
from switchboard.intake.untrusted import screen_texts
from switchboard.models import Agent, AgentSession, InboxItem
from switchboard.notify import sessions

REQUEST_ID = re.compile(r"[a-km-z]{5}")
"""Claude Code's request ids: five letters a-z without ``l`` (``notes/mcp-and-channels.md``)."""
MAX_TOOL_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 2_000
MAX_PREVIEW_CHARS = 4_000
TRUNCATED = " …[truncated]"
BEHAVIORS = {"approve": "allow", "deny": "deny"}


def check_session_id(session_id: str | None) -> str:
    """The adapter's session id (``X-Switchboard-Session``), validated like the stream's.

    Raises:
        InvalidArgument: missing, or not 1-80 characters of ``[A-Za-z0-9_.:-]``.
    """
    if not isinstance(session_id, str):
        raise InvalidArgument("the X-Switchboard-Session header (the adapter's session id) is required")
    return sessions.check_session_id(session_id)


def verdict_event(session: Session, clock: Clock, item: InboxItem) -> None:
    """Write the verdict of a just-decided prompt to its session's stream (once, with the decision)."""
    assert item.session_id is not None and item.decision in BEHAVIORS
    sessions.emit(session, clock, item.agent_id, item.session_id, "verdict",
                  {"request_id": item.request_id, "behavior": BEHAVIORS[item.decision]})
    cutoff = clock.now() - timedelta(seconds=sessions.LIVE_SECONDS)
    row = session.get(AgentSession, item.session_id)
    live = row is not None and row.agent_id == item.agent_id and row.seen_at > cutoff
    item.verdict_state = "sent" if live else "queued"


def _clip(value: Any, limit: int, name: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidArgument(f"{name} must be a{' non-empty' if required else ''} string")
    return value if len(value) <= limit else value[: limit - len(TRUNCATED)] + TRUNCATED


def relay(session: Session, clock: Clock, *, agent_id: str, session_id: str, request_id: Any, tool_name: Any,
          description: Any, input_preview: Any, expires_in_seconds: int) -> tuple[dict[str, Any], bool]:
    """Store a relayed prompt as an open ``permission`` item for the agent's human.

    Args:
        agent_id: the agent whose adapter relayed it (from the token).
        session_id: the relaying adapter session (validated by :func:`check_session_id`).
        request_id: Claude Code's id, 5 letters ``[a-km-z]`` (any case; stored lower-case).
        tool_name, description, input_preview: Claude Code's texts (untrusted). Over-long
            texts are cut with a ``…[truncated]`` marker (200, 2,000, 4,000 characters).
        expires_in_seconds: how long the prompt waits (the ``permission_expiry_seconds`` setting).

    Returns:
        ``(item view, created)``; the same open prompt relayed again by the same session is
        returned as it is (``created`` False).

    Raises:
        InvalidArgument: a malformed field, or a text that could break out of ``<channel>``.
        NotFound: the agent is gone.
    """
    session_id = check_session_id(session_id)
    if not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id.lower()):
        raise InvalidArgument("request_id must be 5 letters a-z without l")
    request_id = request_id.lower()
    tool = _clip(tool_name, MAX_TOOL_NAME_CHARS, "tool_name", required=True)
    assert tool is not None
    tool = " ".join(tool.split())
    desc = _clip(description, MAX_DESCRIPTION_CHARS, "description")
    preview = _clip(input_preview, MAX_PREVIEW_CHARS, "input_preview")
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise NotFound("no such agent")
    bound = session.get(AgentSession, session_id)
    if bound is not None and bound.agent_id != agent_id:  # another agent's session: the same answer as a bad id
        sessions.check_session_id("")
    existing = session.execute(select(InboxItem).where(
        InboxItem.agent_id == agent_id, InboxItem.session_id == session_id, InboxItem.request_id == request_id,
        InboxItem.kind == "permission", InboxItem.status == "open")).scalars().first()
    if existing is not None:
        return view(existing), False
    title = f"{agent.name} asks to run {tool}"
    screened = screen_texts({"tool_name": tool, "description": desc, "input_preview": preview, "title": title},
                            joined=f"{title}: {desc or ''}")
    texts = screened.texts
    now = clock.now()
    item = InboxItem(kind="permission", project_id=None, agent_id=agent_id, human_id=agent.human_id,
                     title=(texts["title"] or title)[:300], body=texts["description"], on_expiry="expire",
                     created_at=now, expires_at=now + timedelta(seconds=expires_in_seconds),
                     session_id=session_id, request_id=request_id, tool_name=(texts["tool_name"] or tool)[:200],
                     input_preview=texts["input_preview"])
    session.add(item)
    session.flush()
    event = feed.append(session, clock, None, "permission.requested",
                        f"Permission prompt {request_id}: {item.title}", subject_id=item.id,
                        data={"inbox_item_id": item.id, "agent_id": agent_id, "request_id": request_id,
                              "tool_name": item.tool_name})
    item.seq = int(event.id or 0)
    session.flush()
    return view(item), True


def start_position(session: Session, agent_id: str, session_id: str) -> int:
    """Where a stream attached without ``Last-Event-ID`` starts: after the agent's newest event,
    except that events targeted at this very session (verdicts decided while it was away, or
    before a hub restart, when it had received nothing yet) are still ahead of it.
    """
    from sqlalchemy import func

    from switchboard.models import AgentEvent

    newest = sessions.newest_id(session, agent_id)
    first_targeted = session.execute(select(func.min(AgentEvent.id)).where(
        AgentEvent.agent_id == agent_id, AgentEvent.session_id == session_id)).scalar()
    return newest if first_targeted is None else min(newest, int(first_targeted) - 1)


def close_session(session: Session, clock: Clock, agent_id: str, session_id: str) -> dict[str, int]:
    """The adapter's session ended: its open prompts expire and its queued verdicts are
    marked ``session_gone`` (nothing is sent to any other session, DESIGN.md §6.5a).

    Returns:
        ``{"expired": n, "session_gone": m}``.
    """
    check_session_id(session_id)
    open_items = session.execute(select(InboxItem.id).where(
        InboxItem.agent_id == agent_id, InboxItem.session_id == session_id, InboxItem.kind == "permission",
        InboxItem.status == "open")).scalars().all()
    for item_id in open_items:
        resolve(session, clock, item_id, via="expiry", expired=True, note="the relaying session ended")
    gone = session.execute(
        update(InboxItem).where(InboxItem.agent_id == agent_id, InboxItem.session_id == session_id,
                                InboxItem.verdict_state == "queued")
        .values(verdict_state="session_gone").execution_options(synchronize_session=False))
    return {"expired": len(open_items), "session_gone": int(gone.rowcount or 0)}  # type: ignore[attr-defined]


def usable_approval(session: Session, clock: Clock, *, agent_id: str, session_id: str | None, human_id: str,
                    tool_suffix: str, mentions: str, ttl_seconds: int) -> InboxItem | None:
    """An allowed prompt that binds a human's decision to one tool call (DESIGN.md §6.6).

    It must have been relayed by ``session_id`` of ``agent_id``, for a tool whose name ends in
    ``tool_suffix``, with an ``input_preview`` naming ``mentions``, allowed by ``human_id``
    within the last ``ttl_seconds``, and never used. The caller marks it used with
    :func:`use` in the same transaction.
    """
    if not session_id:
        return None
    since = clock.now() - timedelta(seconds=ttl_seconds)
    rows = session.execute(select(InboxItem).where(
        InboxItem.kind == "permission", InboxItem.agent_id == agent_id, InboxItem.session_id == session_id,
        InboxItem.status == "decided", InboxItem.decision == "approve", InboxItem.used_at.is_(None),  # type: ignore[union-attr]
        InboxItem.resolved_by_human_id == human_id, InboxItem.resolved_at >= since,  # type: ignore[operator]
    ).order_by(InboxItem.resolved_at.desc())).scalars().all()  # type: ignore[union-attr]
    for item in rows:
        if (item.tool_name or "").endswith(tool_suffix) and mentions in (item.input_preview or ""):
            return item
    return None


def use(session: Session, clock: Clock, item: InboxItem) -> bool:
    """Mark an approval used, once (conditional update). Returns False when already used."""
    moved = session.execute(update(InboxItem).where(InboxItem.id == item.id, InboxItem.used_at.is_(None))  # type: ignore[union-attr]
                            .values(used_at=clock.now()).execution_options(synchronize_session=False))
    return moved.rowcount == 1  # type: ignore[attr-defined]
