"""Injected clocks (CONVENTIONS.md: inject the clock, as slack_sdk's ``Clock``).

All times are timezone-aware UTC ``datetime`` values; ``now_seconds`` is Unix seconds.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Protocol


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
