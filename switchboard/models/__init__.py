"""SQLModel tables. Import this package to register every table on ``SQLModel.metadata``.

Rule: imports only ``clock`` and ``sealing`` (the sealed column types); imported by every
package that reads or writes rows. A new table is a module here, imported below; its
migration goes in ``migrations/versions/``.
"""
from __future__ import annotations

from sqlmodel import SQLModel

from switchboard.models.base import by_key_only, fixed_limit
from switchboard.models.inbox import AgentCursor, InboxItem, Subscription
from switchboard.models.operations import SourceRefusal
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
from switchboard.models.relay import FriendRequest, Friendship, NotifyTarget
from switchboard.models.secrets import SecretRef
from switchboard.models.sessions import AgentEvent, AgentSession
from switchboard.models.sources import Delivery, Source, SourceSecret
from switchboard.models.stamps import ChangeStamp
from switchboard.models.web import LoginLink, WebSession
from switchboard.models.work import Attempt, FeedEvent, Todo, in_state, still_in_state

metadata = SQLModel.metadata

__all__ = [
    "Agent",
    "AgentCursor",
    "AgentEvent",
    "AgentSession",
    "Attempt",
    "ChangeStamp",
    "Delivery",
    "FeedEvent",
    "FriendRequest",
    "Friendship",
    "Grant",
    "Human",
    "HumanToken",
    "Identity",
    "InboxItem",
    "LoginLink",
    "NotifyTarget",
    "Project",
    "ProjectOwner",
    "SecretRef",
    "Source",
    "SourceRefusal",
    "SourceSecret",
    "Subscription",
    "Todo",
    "Token",
    "WebSession",
    "by_key_only",
    "fixed_limit",
    "in_state",
    "metadata",
    "still_in_state",
]
