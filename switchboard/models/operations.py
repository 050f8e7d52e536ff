"""Operational records: what is left of refused deliveries (issue 14)."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from switchboard.models.base import json_column, time_column


class SourceRefusal(SQLModel, table=True):
    """Refused deliveries of one source for one reason: a count and the last few times.

    Refused deliveries (bad signature, too large, malformed request, no secret) are not stored
    (DESIGN.md §5); this tally is what ``switchboard source show`` reports. It never holds a
    body, a header or a signature.
    """

    __tablename__ = "source_refusals"

    source_id: str = Field(primary_key=True, max_length=40)
    reason: str = Field(primary_key=True, max_length=60)
    count: int = Field(default=0)
    last_at: list[str] | None = Field(default=None, sa_column=json_column())
    """ISO-8601 UTC times of the most recent refusals, newest first (at most 5)."""
    updated_at: datetime = Field(sa_column=time_column())
