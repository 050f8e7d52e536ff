"""Column types and id helpers shared by the tables.

Times are stored as naive UTC and returned as aware UTC (``UTCDateTime``), so SQLite and
PostgreSQL behave the same. Public ids are a prefix plus random bytes (DESIGN.md §1).
"""

from __future__ import annotations

import base64
import os
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored as naive UTC, returned as an aware UTC ``datetime``."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc)


JSONType = sa.JSON().with_variant(JSONB(), "postgresql")


def new_id(prefix: str, nbytes: int = 10) -> str:
    """Return ``prefix`` + ``_`` + ``nbytes`` random bytes in lowercase base32 (no padding).

    Args:
        prefix: e.g. ``src`` (sources use 16 bytes: DESIGN.md §1), ``td``, ``dlv``.
        nbytes: random bytes; 10 bytes give 16 characters.
    """
    raw = base64.b32encode(os.urandom(nbytes)).decode("ascii").rstrip("=").lower()
    return f"{prefix}_{raw}"


def json_column(nullable: bool = True) -> Any:
    """A JSON column (JSONB on PostgreSQL)."""
    return sa.Column(JSONType, nullable=nullable)


def time_column(nullable: bool = False, index: bool = False) -> Any:
    """An aware-UTC timestamp column."""
    return sa.Column(UTCDateTime(), nullable=nullable, index=index)
