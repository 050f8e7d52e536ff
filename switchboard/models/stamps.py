"""Change stamps: counters that database triggers bump when configuration rows change.

The receiver caches sources and their secrets (issue 11); a stamp tells every process, and
every server sharing the database, that its cache is stale. Triggers (migration 0007) bump
``sources`` on any INSERT, UPDATE or DELETE of ``sources`` or ``source_secrets``, and
``directory`` on changes to what attribution and wake recipients read, whoever writes
(``serve``, the CLI, another server), so no write path can forget to invalidate.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

SOURCES_STAMP = "sources"
DIRECTORY_STAMP = "directory"
"""Bumped on changes to sources, identities, project owners, grants, agents and projects:
what attribution and wake recipients are computed from."""


class ChangeStamp(SQLModel, table=True):
    """One named counter; ``value`` only grows."""

    __tablename__ = "change_stamps"

    name: str = Field(primary_key=True, max_length=40)
    value: int = Field(default=0)


_STAMP_QUERY = sa.select(sa.column("value")).select_from(sa.table("change_stamps")).where(
    sa.column("name") == sa.bindparam("name"))


def read_stamp(conn: Any, name: str = SOURCES_STAMP) -> int:
    """The current value of change stamp ``name`` on connection ``conn`` (0 when missing)."""
    value = conn.execute(_STAMP_QUERY, {"name": name}).scalar()
    return int(value or 0)
