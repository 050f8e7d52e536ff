"""Sources, their secrets, and deliveries (DESIGN.md §1, §6.1)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import json_column, new_id, new_ordered_id, time_column
from switchboard.sealing.columns import SealedBytes
from switchboard.sealing.text import SealedText


class Source(SQLModel, table=True):
    """A configured inbound endpoint, ``POST /hooks/<id>``; the id is unguessable (16 bytes)."""

    __tablename__ = "sources"

    id: str = Field(default_factory=lambda: new_id("src", 16), primary_key=True, max_length=40)
    project_id: str = Field(foreign_key="projects.id", index=True, max_length=40)
    provider: str = Field(max_length=40)
    queue: str = Field(default="default", max_length=100)
    enabled: bool = Field(default=True)
    trusted_humans: list[str] | None = Field(default=None, sa_column=json_column())
    """Human ids whose deliveries may become work; ``None`` means every human with an identity
    on the provider who owns an agent granted on the project (DESIGN.md §5)."""
    # GitHub only: also accept the legacy X-Hub-Signature (SHA-1) when no SHA-256 header is sent.
    allow_legacy_sha1: bool = Field(default=False)
    todo_events: list[str] | None = Field(default=None, sa_column=json_column())
    """Event kinds (``issues``, ``issues.opened``, ``event_callback.app_mention``) whose
    deliveries become todos; ``None`` means the provider's default list
    (:mod:`switchboard.sources.routing`). The others become feed events only."""
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())


class SourceSecret(SQLModel, table=True):
    """One verification secret of a source; several may be valid at once (rotation)."""

    __tablename__ = "source_secrets"

    id: str = Field(default_factory=lambda: new_id("sss"), primary_key=True, max_length=40)
    source_id: str = Field(foreign_key="sources.id", index=True, max_length=40)
    # Sealed with the vault key ring (issue 13 item 5): a reader of the file cannot forge deliveries.
    secret: str = Field(sa_column=sa.Column(SealedText(), nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    expires_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))


MAX_PROCESS_FAILURES = 5


class Delivery(SQLModel, table=True):
    """One received HTTP request to a source, stored with its verdict.

    States: ``received`` (stored, acked, not processed yet) → ``processed`` | ``quarantined``
    | ``rejected`` | ``failed``. ``process_failures`` counts processing runs that crashed; at
    :data:`MAX_PROCESS_FAILURES` the delivery is ``failed`` (``processing_failed``) instead of
    being swept forever. A quarantined delivery is ``released`` back to ``received``
    (processed again, once) or ``discarded``, and ``expired`` after the quarantine retention.
    """

    __tablename__ = "deliveries"
    __table_args__ = (
        sa.UniqueConstraint("source_id", "dedup_key", name="uq_delivery_dedup"),
        sa.UniqueConstraint("source_id", "body_digest", name="uq_delivery_body_digest"),
        sa.Index("ix_deliveries_status_received_at", "status", "received_at"),
    )

    id: str = Field(default_factory=lambda: new_ordered_id("dlv"), primary_key=True, max_length=40)
    # No index of its own: uq_delivery_dedup (source_id, dedup_key) leads with it (migration 0017).
    source_id: str = Field(foreign_key="sources.id", max_length=40)
    # No index (migration 0024): every reader filters by status, source or id first, and a
    # project is never deleted or re-keyed (the foreign key's parent side).
    project_id: str = Field(foreign_key="projects.id", max_length=40)
    dedup_key: str | None = Field(default=None, max_length=300)
    body_digest: str | None = Field(default=None, max_length=64)
    """SHA-256 (hex) of the raw body for schemes whose signature has no timestamp: a replay
    with fresh headers is a duplicate while this row is kept (issue 12 #7)."""
    status: str = Field(default="received", max_length=20)
    event: str | None = Field(default=None, max_length=100)
    content_type: str | None = Field(default=None, max_length=200)
    headers: dict[str, Any] | None = Field(default=None, sa_column=json_column())
    # Sealed with the vault key ring on write, opened on read (DESIGN.md §2).
    raw_body: bytes | None = Field(default=None, sa_column=sa.Column(SealedBytes(), nullable=True))
    body_bytes: int = Field(default=0)
    human_id: str | None = Field(default=None, foreign_key="humans.id", max_length=40)
    quarantine_reason: str | None = Field(default=None, max_length=40)
    error_code: str | None = Field(default=None, max_length=60)
    error_detail: str | None = Field(default=None, max_length=500)
    todo_id: str | None = Field(default=None, max_length=40)
    process_failures: int = Field(default=0)
    received_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    processed_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    released_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    released_by: str | None = Field(default=None, max_length=40)
    """The human who released it from quarantine (and answers for it when it has no identity)."""
