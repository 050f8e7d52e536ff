"""Change stamps: counters that database triggers bump when configuration rows change.

The receiver caches sources and their secrets (issue 11); a stamp tells every process, and
every server sharing the database, that its cache is stale. Triggers (migration 0007) bump
``sources`` on any INSERT, UPDATE or DELETE of ``sources`` or ``source_secrets``, whoever
writes (``serve``, the CLI, another server), so no write path can forget to invalidate.
"""

from __future__ import annotations

from sqlmodel import Field, SQLModel

SOURCES_STAMP = "sources"


class ChangeStamp(SQLModel, table=True):
    """One named counter; ``value`` only grows."""

    __tablename__ = "change_stamps"

    name: str = Field(primary_key=True, max_length=40)
    value: int = Field(default=0)
