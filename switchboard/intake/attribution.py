"""Attribute a verified delivery to a known human, or name why it is quarantined (DESIGN.md §5).

A delivery is attributed when its sender's stable identity is linked to a human, the sender
is not a bot, and the human is trusted on the source: listed in ``Source.trusted_humans`` when
the source has a list, else (the default) an owner of the source's project or the owner of at
least one agent granted on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlmodel import Session

from switchboard.models import Agent, Grant, Identity, ProjectOwner, Source
from switchboard.sources import Sender

UNKNOWN_SENDER = "unknown_sender"
BOT_SENDER = "bot_sender"
UNTRUSTED_SENDER = "untrusted_sender"
REASONS = (UNKNOWN_SENDER, BOT_SENDER, UNTRUSTED_SENDER)


@dataclass(frozen=True)
class Attribution:
    """The outcome: a ``human_id``, or a quarantine ``reason`` (one of :data:`REASONS`)."""

    human_id: str | None
    reason: str | None


def is_trusted(session: Session, source: Source, human_id: str) -> bool:
    """Whether ``human_id`` may originate work on ``source`` (see the module docstring)."""
    if source.trusted_humans is not None:
        return human_id in source.trusted_humans
    owner = session.execute(
        select(ProjectOwner.id).where(ProjectOwner.human_id == human_id, ProjectOwner.project_id == source.project_id)
        .limit(1)
    ).scalar()
    if owner is not None:
        return True
    granted = session.execute(
        select(Grant.id).join(Agent, Agent.id == Grant.agent_id)
        .where(Agent.human_id == human_id, Grant.project_id == source.project_id).limit(1)
    ).first()
    return granted is not None


def attribute(session: Session, sender: Sender | None, source: Source | None = None) -> Attribution:
    """Look up the sender's identity by stable id, then check trust on ``source``.

    A bot sender is quarantined even when its account is linked: a bot is not a human
    who can consent.

    Args:
        session: a database session.
        sender: the verified sender, ``None`` when the payload names none.
        source: the delivery's source; ``None`` skips the trust check (tests, tools).
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
    if source is not None and not is_trusted(session, source, identity.human_id):
        return Attribution(None, UNTRUSTED_SENDER)
    return Attribution(identity.human_id, None)
