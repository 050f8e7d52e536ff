"""Slack's signing secret scheme ``v0``.

``X-Slack-Signature: v0=<hex HMAC-SHA256>`` over ``v0:<X-Slack-Request-Timestamp>:<raw body>``,
keyed with the signing secret as UTF-8 text (it looks like hex but is used as-is); requests
more than 300 s from the clock either way are refused.

Source: https://api.slack.com/authentication/verifying-requests-from-slack
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence

from switchboard.clock import Clock
from switchboard.verifiers import SignatureMalformed, SignatureMismatch, SignatureMissing, timestamp

_SIGNATURE = re.compile(r"v0=([0-9a-fA-F]{64})")


def sign(body: bytes, ts: str | int, secret: str) -> str:
    """The ``X-Slack-Signature`` value for ``body`` at ``ts`` (for tests and tools)."""
    base = b"v0:" + str(ts).encode("ascii") + b":" + body
    return "v0=" + hmac.new(secret.encode("utf-8"), base, hashlib.sha256).hexdigest()


def verify(body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
           tolerance: int = timestamp.DEFAULT_TOLERANCE_SECONDS) -> None:
    """Verify a Slack request.

    Args:
        body: the exact request bytes (form bodies included: never rebuilt from fields).
        headers: request headers with lower-case names.
        secrets: the app's currently valid signing secrets.
        clock: the injected clock.
        tolerance: the replay window in seconds (both ways).

    Raises:
        SignatureMissing: no signature or timestamp header.
        SignatureMalformed: the timestamp is not digits or the signature is not ``v0=`` + 64 hex.
        TimestampOutOfWindow: the timestamp is more than ``tolerance`` seconds away.
        SignatureMismatch: no secret matches.
    """
    signature = headers.get("x-slack-signature")
    if not signature:
        raise SignatureMissing()
    raw_ts = headers.get("x-slack-request-timestamp")
    ts = timestamp.parse(raw_ts, "X-Slack-Request-Timestamp")
    match = _SIGNATURE.fullmatch(signature.strip())
    if match is None:
        raise SignatureMalformed("X-Slack-Signature must be 'v0=' followed by 64 hex digits")
    timestamp.check_window(ts, clock, tolerance)
    given = match.group(1).lower().encode("ascii")
    base = b"v0:" + str(raw_ts).encode("ascii") + b":" + body
    ok = False
    for secret in secrets:
        expected = hmac.digest(secret.encode("utf-8"), base, "sha256").hex().encode("ascii")
        ok |= hmac.compare_digest(expected, given)
    if not ok:
        raise SignatureMismatch()
