"""Injected clocks (CONVENTIONS.md: inject the clock, as slack_sdk's ``Clock``).

All times are timezone-aware UTC ``datetime`` values; ``now_seconds`` is Unix seconds.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Protocol

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
"""The Unix epoch, aware UTC: ``(at - EPOCH) // timedelta(...)`` counts whole units exactly
(no float), as delivery ids and the delivery writer's pipe do."""


class Clock(Protocol):
    """A source of the current time (UTC)."""

    def now(self) -> datetime:
        """Return the current time as an aware UTC datetime."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        """Return ``datetime.now(timezone.utc)``."""
        return datetime.now(timezone.utc)


class FixedClock:
    """A clock that stands still until moved; for tests and replaying vectors."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        """Return the fixed time."""
        return self.at


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def iso(value: datetime | None) -> str | None:
    """A UTC time as it appears on the wire (tools, REST, feed): ISO 8601 with ``Z``, or ``None``.

    Args:
        value: An aware UTC ``datetime`` (as models read them back), or ``None``.

    Returns:
        e.g. ``"2026-01-01T12:00:00.123456Z"``; ``None`` for ``None``.
    """
    return value.isoformat().replace("+00:00", "Z") if value is not None else None
