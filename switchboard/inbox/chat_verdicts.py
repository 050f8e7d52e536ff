"""Chat verdicts: a human answers a permission prompt from Slack, Discord, Teams, Mattermost or
Telegram (DESIGN.md §6.5, §6.5a).

A message on a verified chat source whose sender is attributed to a human, and whose text is
``^\\s*(y|yes|n|no)\\s+([a-km-z]{5})\\s*$`` (case-insensitive; the form the official Claude Code
channel plugins use), is a verdict, never chat: processing consumes it (no todo, one feed event)
and :func:`apply` decides the one open permission item of that human carrying the id. When no
open item, or more than one, carries it (ids are unique per session, not globally), or the id
is expired or already decided, nothing is decided and the attempt is logged. A stranger's
message is never a verdict: attribution quarantines it before this runs.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.inbox.items import resolve
from switchboard.models import InboxItem

log = logging.getLogger(__name__)

VERDICT = re.compile(r"^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$", re.IGNORECASE)
PROVIDERS = ("slack", "discord", "teams", "mattermost", "telegram")
_SLACK_MENTION = re.compile(r"^\s*<[@!][^>]{0,200}>")
_TEAMS_MENTION = re.compile(r"<at>[^<]{0,200}</at>")
_TAG = re.compile(r"<[^>]{0,200}>")


def message_text(provider: str, payload: Any) -> str | None:
    """The human-typed text of a chat delivery, without a leading bot mention, or ``None``.

    Slack: ``event.text`` (Events API) or the slash command's ``text``; Discord: the first
    string option of an application command; Teams: ``text`` without ``<at>`` markup;
    Mattermost: ``text`` without the trigger word; Telegram: ``message.text``.
    """
    if not isinstance(payload, dict):
        return None
    value: Any = None
    if provider == "slack":
        event = payload.get("event")
        value = event.get("text") if isinstance(event, dict) else payload.get("text")
        if isinstance(value, str):
            value = _SLACK_MENTION.sub("", value)
    elif provider == "discord":
        data = payload.get("data")
        options = data.get("options") if isinstance(data, dict) else None
        if isinstance(options, list):
            value = next((o.get("value") for o in options if isinstance(o, dict) and isinstance(o.get("value"), str)),
                         None)
    elif provider == "teams":
        raw = payload.get("text")
        if isinstance(raw, str):
            value = html.unescape(_TAG.sub("", _TEAMS_MENTION.sub("", raw)))
    elif provider == "mattermost":
        value = payload.get("text")
        trigger = payload.get("trigger_word")
        if isinstance(value, str) and isinstance(trigger, str) and trigger and value.startswith(trigger):
            value = value[len(trigger):]
    elif provider == "telegram":
        message = payload.get("message")
        value = message.get("text") if isinstance(message, dict) else None
    return value if isinstance(value, str) and len(value) <= 200 else None


def parse(text: str | None) -> tuple[str, str] | None:
    """``(decision, request_id)`` (``approve``/``deny``, lower-case id) when ``text`` is a verdict."""
    if text is None:
        return None
    match = VERDICT.match(text)
    if match is None:
        return None
    return ("approve" if match.group(1).lower().startswith("y") else "deny"), match.group(2).lower()


def apply(session: Session, clock: Clock, human_id: str, decision: str, request_id: str) -> dict[str, Any]:
    """Decide the one open permission item of ``human_id`` with ``request_id``, via ``chat``.

    Returns:
        ``{"outcome": "decided", "item": view, "agent_id"}``, or ``{"outcome": reason}`` with
        reason ``unknown`` (no open item of this human carries the id: unknown, expired or
        already decided) or ``ambiguous`` (several do; decide in the inbox instead).
    """
    now = clock.now()
    rows = session.execute(select(InboxItem).where(
        InboxItem.human_id == human_id, InboxItem.request_id == request_id, InboxItem.kind == "permission",
        InboxItem.status == "open")).scalars().all()
    live = [i for i in rows if i.expires_at is None or i.expires_at > now]
    if len(live) != 1:
        outcome = "unknown" if not live else "ambiguous"
        log.info("chat verdict ignored: %s request id for human %s", outcome, human_id)
        return {"outcome": outcome}
    data, agent_id = resolve(session, clock, live[0].id, via="chat", human_id=human_id, decision=decision)
    return {"outcome": "decided", "item": data, "agent_id": agent_id}
