"""SQLModel tables. Import this package to register every table on ``SQLModel.metadata``."""

from __future__ import annotations

from sqlmodel import SQLModel

from switchboard.models.principals import Agent, Grant, Human, Identity, Project, Token
from switchboard.models.secrets import SecretRef
from switchboard.models.sources import Delivery, Source, SourceSecret
from switchboard.models.work import Attempt, FeedEvent, Todo

metadata = SQLModel.metadata

__all__ = [
    "Agent",
    "Attempt",
    "Delivery",
    "FeedEvent",
    "Grant",
    "Human",
    "Identity",
    "Project",
    "SecretRef",
    "Source",
    "SourceSecret",
    "Todo",
    "Token",
    "metadata",
]
