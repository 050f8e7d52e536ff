"""Secret refs: values taken out of payloads, AES-256-GCM encrypted at rest (DESIGN.md §5)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import time_column


class SecretRef(SQLModel, table=True):
    """One secret value behind a ref (``sec_`` + 24 url-safe random bytes).

    The value is only ever stored as ``ciphertext`` (AES-256-GCM with the 16-byte tag
    appended) under the key ``key_id`` of the vault's key ring, with a fresh 12-byte ``nonce``
    and associated data binding ``version``, the ref and the project
    (:mod:`switchboard.intake.vault`).
    """

    __tablename__ = "secret_refs"

    ref: str = Field(primary_key=True, max_length=40)
    # No index (migration 0024): refs are read by ref, and the key rotation reads them all.
    project_id: str = Field(foreign_key="projects.id", max_length=40)
    delivery_id: str | None = Field(default=None, max_length=40)
    kind: str = Field(max_length=60)
    version: int = Field(default=1)
    key_id: str = Field(max_length=40)
    nonce: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    ciphertext: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    rotated_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
