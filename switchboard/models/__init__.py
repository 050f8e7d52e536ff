"""SQLModel tables. Import this package to register every table on ``SQLModel.metadata``."""

from __future__ import annotations

from sqlmodel import SQLModel

from switchboard.models.principals import (
    Agent,
    Grant,
    Human,
    HumanToken,
    Identity,
    Project,
    ProjectOwner,
    Token,
)
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
    "HumanToken",
    "Identity",
    "Project",
    "ProjectOwner",
    "SecretRef",
    "Source",
    "SourceSecret",
    "Todo",
    "Token",
    "metadata",
]
