"""Column types and id helpers shared by the tables.

Times are stored as naive UTC and returned as aware UTC (``UTCDateTime``), so SQLite and
PostgreSQL behave the same. Public ids are a prefix plus random bytes (DESIGN.md §1); a
delivery's id leads with its time (:func:`new_ordered_id`).
"""

from __future__ import annotations

import base64
import os
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

from switchboard.clock import EPOCH


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
    raw = os.urandom(nbytes)
    if nbytes == 10:
        # base64.b32encode's pure-Python loop, for the 10-byte ids made per delivery and todo
        # (about 5 µs on the receiver's event loop, issue 11): two characters per 10 bits.
        return f"{prefix}_{_eighty_bits(_B32_PAIRS, int.from_bytes(raw, 'big'))}"
    return f"{prefix}_{base64.b32encode(raw).decode('ascii').rstrip('=').lower()}"


_B32_PAIRS = [a + b for a in "abcdefghijklmnopqrstuvwxyz234567" for b in "abcdefghijklmnopqrstuvwxyz234567"]
"""Lower-case base32 (RFC 4648 §6's alphabet) of every 10-bit value, as two characters."""

_MILLISECOND = timedelta(milliseconds=1)
_SORTED_PAIRS = [a + b for a in "234567abcdefghijklmnopqrstuvwxyz" for b in "234567abcdefghijklmnopqrstuvwxyz"]
"""Every 10-bit value as two characters of the same 32 (``[a-z2-7]``), given to the values in
ASCII order, so that the strings sort as the numbers do."""


def new_ordered_id(prefix: str, at: datetime | None = None) -> str:
    """Return ``prefix`` + ``_`` + 26 characters of ``[a-z2-7]`` that sort by creation time.

    A ULID's layout (github.com/ulid/spec): 48 bits of Unix time in milliseconds (UTC), then
    80 random bits (the same randomness as :func:`new_id`'s 10 bytes), 130 bits written as 13
    pairs of characters with :data:`_SORTED_PAIRS`. Ids made in different milliseconds sort by
    time; in one millisecond, at random.

    Args:
        prefix: e.g. ``dlv``.
        at: the time the id stands for (aware; the receiver passes the ``received_at`` it
            stores, from the hub's clock); ``None``: now, by the system clock.

    Used for deliveries (issue 11): new ids fall together in the primary key's index of the
    deliveries table (at its end, on an instance that never had the older random ids), and a
    commit of a batch rewrites one or two of its pages instead of one page a delivery at random
    places. Under sustained ingest that index was one of three randomly keyed
    ones (with the dedup key's and the body digest's), each about a page of SQLite's log per
    delivery (docs/PERFORMANCE.md, 2026-12-07).
    """
    ms = time.time_ns() // 1_000_000 if at is None else (at - EPOCH) // _MILLISECOND
    return (f"{prefix}_{_SORTED_PAIRS[ms >> 40]}{_SORTED_PAIRS[(ms >> 30) & 1023]}{_SORTED_PAIRS[(ms >> 20) & 1023]}"
            f"{_SORTED_PAIRS[(ms >> 10) & 1023]}{_SORTED_PAIRS[ms & 1023]}"
            f"{_eighty_bits(_SORTED_PAIRS, int.from_bytes(os.urandom(10), 'big'))}")


def _eighty_bits(pairs: list[str], n: int) -> str:
    """``n`` (80 bits) as 16 characters, two of ``pairs`` (every 10-bit value's) per 10 bits,
    the highest first: written out rather than looped, as ids are made on the event loop."""
    return (f"{pairs[n >> 70]}{pairs[(n >> 60) & 1023]}{pairs[(n >> 50) & 1023]}{pairs[(n >> 40) & 1023]}"
            f"{pairs[(n >> 30) & 1023]}{pairs[(n >> 20) & 1023]}{pairs[(n >> 10) & 1023]}{pairs[n & 1023]}")


def by_key_only(column: Any) -> Any:
    """``column`` in a form no index can serve (``coalesce(column, '')``), for the state check of
    a statement that names its rows by primary key: ``WHERE id IN (...) AND <this> = 'received'``.

    Issue 11: with no statistics (SQLite here never runs ANALYZE) or stale ones (PostgreSQL
    after a burst), a planner may read such a statement through an index on the state column
    instead of the key: SQLite planned processing's ``id IN (<32 ids>) AND status = ?`` as a
    search of ``ix_deliveries_status_received_at``, every ``received`` delivery read for each
    batch (1.7-3.3 ms with 2,000 of them, growing with the backlog). Same meaning for a column
    that is never null.
    """
    return sa.func.coalesce(column, sa.literal_column("''"))


def fixed_limit(rows: int) -> Any:
    """``LIMIT <rows>`` written into the SQL text, for a statement's ``.limit()``, instead of the
    bound parameter SQLAlchemy makes of an int.

    Issue 11: psycopg prepares a statement on the server after its fifth execution, and
    PostgreSQL then plans it once for any values (a generic plan) unless that plan's estimated
    cost is above the plans made for the values given (custom plans). A generic plan does not
    know a ``LIMIT $n``, assumes a tenth of the rows are wanted, and costs an ordered index scan
    at that share: the claim's pick (``LIMIT 1`` over the pending todos) was costed 411 against
    9.6, so PostgreSQL planned every claim again, a fifth of the server's time per claim. With
    the limit in the text the generic plan is the custom plan, and is kept.

    Args:
        rows: a constant (a page size, 1); a limit that changes per call stays a parameter.

    Raises:
        ValueError: ``rows`` is not a positive int (it is written into SQL).
    """
    if type(rows) is not int or rows < 1:
        raise ValueError(f"a fixed limit is a positive int, not {rows!r}")
    return sa.literal_column(str(rows), sa.Integer)


def json_column(nullable: bool = True) -> Any:
    """A JSON column (JSONB on PostgreSQL)."""
    return sa.Column(JSONType, nullable=nullable)


def time_column(nullable: bool = False, index: bool = False) -> Any:
    """An aware-UTC timestamp column."""
    return sa.Column(UTCDateTime(), nullable=nullable, index=index)
