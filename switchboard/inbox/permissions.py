"""Permission prompts relayed from Claude Code, and their verdicts (DESIGN.md §6.5, §6.5a).

The channel adapter forwards each ``notifications/claude/channel/permission_request``
(``{request_id, tool_name, description, input_preview}``) to the hub with its own session id.
:func:`relay` stores it as an inbox item of kind ``permission`` for the agent's human, bound to
that session. The texts come from Claude Code and are untrusted: they are screened like a
delivery (:mod:`switchboard.intake.untrusted`: a ``<channel>`` break refuses the prompt, secret
values become refs) before they are stored or shown. A prompt has no project, so the values
behind its refs are dropped rather than vaulted: the agent that relayed it holds them already.

A human decides it like any item (:func:`switchboard.inbox.items.resolve`: CLI, REST, web, or a
chat verdict); the first decision wins. The decision leaves ``verdict_state = "waiting"``;
:func:`claim_verdicts` hands it, once (a conditional update), to the stream of the relaying
session when that session is attached in this process: right after the decision, when the
session (re-)attaches, and on every maintenance pass. So a verdict survives a hub restart, and
goes nowhere else: when the adapter reports its session closed (:func:`close_session`), open
prompts of that session expire and waiting verdicts become ``session_gone``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument, NotFound
from switchboard.feed import events as feed
from switchboard.inbox.items import view
from switchboard.intake.untrusted import screen_texts
from switchboard.models import Agent, InboxItem

REQUEST_ID = re.compile(r"[a-km-z]{5}")
"""Claude Code's request ids: five letters a-z without ``l`` (``notes/mcp-and-channels.md``)."""
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
MAX_TOOL_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 2_000
MAX_PREVIEW_CHARS = 4_000
TRUNCATED = " …[truncated]"
BEHAVIORS = {"approve": "allow", "deny": "deny"}


def check_session_id(session_id: str | None) -> str:
    """The adapter's session id, validated.

    Raises:
        InvalidArgument: missing, or not 8-64 characters of ``[A-Za-z0-9_-]``.
    """
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise InvalidArgument("X-Switchboard-Session must be 8-64 characters of A-Z a-z 0-9 _ -")
    return session_id


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


def claim_verdicts(session: Session, clock: Clock, sessions: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """Take the waiting verdicts of the given attached sessions, each exactly once.

    Args:
        sessions: ``(agent_id, session_id)`` pairs attached in this process; a verdict is bound
            to both, so another agent presenting the same session id gets nothing.

    Returns:
        ``[{agent_id, session_id, request_id, behavior, item_id}]`` now marked ``sent``; a
        concurrent claimer (another process) that won the conditional update gets it instead.
    """
    pairs = set(sessions)
    if not pairs:
        return []
    rows = session.execute(select(InboxItem).where(
        InboxItem.verdict_state == "waiting",
        InboxItem.session_id.in_({sid for _, sid in pairs}))).scalars().all()  # type: ignore[union-attr]
    out = []
    now = clock.now()
    for item in rows:
        if (item.agent_id, item.session_id) not in pairs:
            continue
        moved = session.execute(
            update(InboxItem).where(InboxItem.id == item.id, InboxItem.verdict_state == "waiting")
            .values(verdict_state="sent", verdict_sent_at=now).execution_options(synchronize_session=False))
        if moved.rowcount == 1:  # type: ignore[attr-defined]
            out.append({"agent_id": item.agent_id, "session_id": str(item.session_id),
                        "request_id": str(item.request_id), "behavior": BEHAVIORS[str(item.decision)],
                        "item_id": item.id})
    return out


def waiting_for(session: Session, sessions: Iterable[tuple[str, str]]) -> bool:
    """True when a verdict waits for one of these ``(agent_id, session_id)`` sessions (one indexed read)."""
    pairs = set(sessions)
    rows = session.execute(select(InboxItem.agent_id, InboxItem.session_id).where(
        InboxItem.verdict_state == "waiting",
        InboxItem.session_id.in_({sid for _, sid in pairs}))).all()  # type: ignore[union-attr]
    return any((a, sid) in pairs for a, sid in rows)


def unsend(session: Session, item_ids: Iterable[str]) -> None:
    """Put verdicts back to ``waiting`` (the session detached before it could be offered them)."""
    ids = list(item_ids)
    if ids:
        session.execute(update(InboxItem).where(InboxItem.id.in_(ids), InboxItem.verdict_state == "sent")  # type: ignore[attr-defined]
                        .values(verdict_state="waiting", verdict_sent_at=None)
                        .execution_options(synchronize_session=False))


def close_session(session: Session, clock: Clock, agent_id: str, session_id: str) -> dict[str, int]:
    """The adapter's session ended: its open prompts expire and its waiting verdicts are
    marked ``session_gone`` (nothing is sent to any other session, DESIGN.md §6.5a).

    Returns:
        ``{"expired": n, "session_gone": m}``.
    """
    from switchboard.inbox.items import resolve

    check_session_id(session_id)
    open_items = session.execute(select(InboxItem.id).where(
        InboxItem.agent_id == agent_id, InboxItem.session_id == session_id, InboxItem.kind == "permission",
        InboxItem.status == "open")).scalars().all()
    for item_id in open_items:
        resolve(session, clock, item_id, via="expiry", expired=True, note="the relaying session ended")
    gone = session.execute(
        update(InboxItem).where(InboxItem.agent_id == agent_id, InboxItem.session_id == session_id,
                                InboxItem.verdict_state == "waiting")
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
