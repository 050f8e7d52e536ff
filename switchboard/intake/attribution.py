"""Attribute a verified delivery to a known human, or name why it is quarantined (DESIGN.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlmodel import Session

from switchboard.models import Identity
from switchboard.sources import Sender

UNKNOWN_SENDER = "unknown_sender"
BOT_SENDER = "bot_sender"


@dataclass(frozen=True)
class Attribution:
    """The outcome: a ``human_id``, or a quarantine ``reason`` (``unknown_sender``, ``bot_sender``)."""

    human_id: str | None
    reason: str | None


def attribute(session: Session, sender: Sender | None) -> Attribution:
    """Look up the sender's identity by stable id.

    A bot sender is quarantined even when its account is linked: a bot is not a human
    who can consent.
    """
    if sender is None:
        return Attribution(None, UNKNOWN_SENDER)
    if sender.is_bot:
        return Attribution(None, BOT_SENDER)
    identity = session.execute(
        select(Identity).where(
            Identity.provider == sender.provider,
            Identity.workspace == sender.workspace,
            Identity.external_id == sender.external_id,
        )
    ).scalars().first()
    if identity is None:
        return Attribution(None, UNKNOWN_SENDER)
    return Attribution(identity.human_id, None)
