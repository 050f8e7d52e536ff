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


_STAMPS = ChangeStamp.__table__  # type: ignore[attr-defined]
_STAMP_QUERY: Any = None


def read_stamp(conn: Any, name: str = SOURCES_STAMP) -> int:
    """The current value of change stamp ``name`` on connection ``conn`` (0 when missing).

    A prepared statement (:mod:`switchboard.prepared`): every processing batch and every
    delivery writer batch reads a stamp, and SQLAlchemy's per-execution work was most of its
    cost (issue 11)."""
    global _STAMP_QUERY
    if _STAMP_QUERY is None:
        from switchboard.prepared import Prepared  # not at import: models load before the feed it imports

        _STAMP_QUERY = Prepared(sa.select(_STAMPS.c.value).where(_STAMPS.c.name == sa.bindparam("name")),
                                [_STAMPS.c.value])
    rows = _STAMP_QUERY.run(conn, {"name": name})
    return int(rows[0]["value"] or 0) if rows else 0
