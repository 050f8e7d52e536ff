"""Signed timestamps and replay windows (Slack, Standard Webhooks, Discord framing).

A timestamp header is Unix seconds written with ASCII digits only: ``1614265330.5``, ``1e9``,
`` 1614265330`` and an empty value are malformed (webhook-faults.md #11). The window is
symmetric: a timestamp more than ``tolerance`` seconds old *or ahead* of the clock fails.
"""

from __future__ import annotations

import re

from switchboard.clock import Clock
from switchboard.verifiers import SignatureMalformed, SignatureMissing, TimestampOutOfWindow

DEFAULT_TOLERANCE_SECONDS = 300
_DIGITS = re.compile(r"[0-9]{1,12}")


def parse(value: str | None, header: str) -> int:
    """Parse a Unix-seconds timestamp header.

    Args:
        value: the header value, or ``None`` when absent.
        header: the header's name, for the error message.

    Returns:
        Seconds since the epoch.

    Raises:
        SignatureMissing: absent or empty (nothing to verify against).
        SignatureMalformed: anything other than 1-12 ASCII digits.
    """
    if value is None or value == "":
        raise SignatureMissing()
    # re.ASCII is implied by the explicit class; fullmatch refuses padding and signs.
    if not _DIGITS.fullmatch(value):
        raise SignatureMalformed(f"{header} must be Unix seconds in ASCII digits")
    return int(value)


def check_window(timestamp: int, clock: Clock, tolerance: int = DEFAULT_TOLERANCE_SECONDS) -> None:
    """Refuse a timestamp more than ``tolerance`` seconds from ``clock`` either way.

    Raises:
        TimestampOutOfWindow: too old or too far in the future.
    """
    now = int(clock.now().timestamp())
    if abs(now - timestamp) > tolerance:
        raise TimestampOutOfWindow()
