"""Microsoft Teams outgoing webhooks: ``Authorization: HMAC <base64 HMAC-SHA256 of the raw body>``.

The key is the *base64-decoded* security token Teams shows once when the webhook is created
(32 bytes), never the token's text.

Source: https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/add-outgoing-webhook
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence

from switchboard.verifiers import SignatureMalformed, SignatureMismatch, SignatureMissing

_HEADER = re.compile(r"HMAC ([A-Za-z0-9+/]{43}=)")


def decode_token(token: str) -> bytes:
    """Decode a Teams security token (strict base64).

    Raises:
        ValueError: not valid base64 or empty.
    """
    try:
        key = base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a Teams security token is base64") from None
    if not key:
        raise ValueError("a Teams security token must not be empty")
    return key


def sign(body: bytes, token: str) -> str:
    """The ``Authorization`` value Teams sends for ``body`` (for tests and tools)."""
    digest = hmac.new(decode_token(token), body, hashlib.sha256).digest()
    return "HMAC " + base64.b64encode(digest).decode("ascii")


def verify(body: bytes, headers: Mapping[str, str], tokens: Sequence[str]) -> None:
    """Verify a Teams outgoing-webhook request.

    Args:
        body: the exact request bytes.
        headers: request headers with lower-case names.
        tokens: the webhook's currently valid security tokens (base64 text).

    Raises:
        SignatureMissing: no ``Authorization`` header.
        SignatureMalformed: the header is not ``HMAC`` + a base64 SHA-256 digest.
        SignatureMismatch: no token matches.
    """
    header = headers.get("authorization")
    if not header:
        raise SignatureMissing()
    match = _HEADER.fullmatch(header.strip())
    if match is None:
        raise SignatureMalformed("Authorization must be 'HMAC ' followed by a base64 SHA-256 digest")
    given = base64.b64decode(match.group(1))
    ok = False
    for token in tokens:
        try:
            key = decode_token(token)
        except ValueError:
            continue  # refused at configuration time
        ok |= hmac.compare_digest(hmac.digest(key, body, "sha256"), given)
    if not ok:
        raise SignatureMismatch()
