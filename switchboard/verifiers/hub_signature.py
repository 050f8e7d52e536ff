"""GitHub's ``X-Hub-Signature-256`` scheme: ``sha256=`` + hex HMAC-SHA256 of the raw body.

Source: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
(the HMAC is over the exact delivered bytes, keyed with the webhook secret as UTF-8).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence

from switchboard.verifiers import SignatureMalformed, SignatureMismatch, SignatureMissing

__all__ = ["SignatureMismatch", "SignatureMissing", "sign", "verify"]

_HEADER = re.compile(r"sha256=([0-9a-fA-F]{64})")


def sign(body: bytes, secret: str | bytes) -> str:
    """Return the ``X-Hub-Signature-256`` value for ``body`` under ``secret``.

    Args:
        body: the exact request bytes.
        secret: the webhook secret (``str`` is encoded as UTF-8, as GitHub does).
    """
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(body: bytes, header: str | None, secrets: Sequence[str | bytes]) -> None:
    """Check ``header`` against every secret, in constant time per comparison.

    Args:
        body: the exact request bytes (never a re-serialisation).
        header: the ``X-Hub-Signature-256`` value, or ``None`` when absent.
        secrets: the source's currently valid secrets (several during rotation).

    Raises:
        SignatureMissing: no header.
        SignatureMalformed: the header is not ``sha256=`` followed by 64 hex digits.
        SignatureMismatch: no secret matches.
    """
    if header is None or header == "":
        raise SignatureMissing()
    match = _HEADER.fullmatch(header.strip())
    if match is None:
        raise SignatureMalformed("X-Hub-Signature-256 must be 'sha256=' followed by 64 hex digits")
    verify_hex(body, match.group(1), secrets)


def verify_hex(body: bytes, given_hex: str, secrets: Sequence[str | bytes]) -> None:
    """Check a bare hex HMAC-SHA256 of ``body`` against every secret (constant time).

    Also used by Gitea and Forgejo, which send the same digest without the ``sha256=`` prefix.

    Raises:
        SignatureMismatch: no secret matches.
    """
    given = given_hex.lower().encode("ascii")
    ok = False
    for secret in secrets:
        key = secret.encode("utf-8") if isinstance(secret, str) else secret
        expected = hmac.digest(key, body, "sha256").hex().encode("ascii")  # OpenSSL's one-shot HMAC
        # Compare against every secret, so timing does not reveal which one matched.
        ok |= hmac.compare_digest(expected, given)
    if not ok:
        raise SignatureMismatch()


_SHA1_HEADER = re.compile(r"sha1=([0-9a-fA-F]{40})")


def sign_sha1(body: bytes, secret: str | bytes) -> str:
    """The legacy ``X-Hub-Signature`` value (``sha1=`` + hex HMAC-SHA1) for ``body``."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest()


def verify_sha1(body: bytes, header: str | None, secrets: Sequence[str | bytes]) -> None:
    """Check GitHub's legacy ``X-Hub-Signature`` (HMAC-SHA1), for sources that opt in only.

    Source: earlier revisions of GitHub's "Securing your webhooks" (SHA-1 is still sent beside
    SHA-256 for compatibility). A source that has not opted in never calls this.

    Raises:
        SignatureMissing: no header. SignatureMalformed: not ``sha1=`` + 40 hex digits.
        SignatureMismatch: no secret matches.
    """
    if header is None or header == "":
        raise SignatureMissing()
    match = _SHA1_HEADER.fullmatch(header.strip())
    if match is None:
        raise SignatureMalformed("X-Hub-Signature must be 'sha1=' followed by 40 hex digits")
    given = match.group(1).lower().encode("ascii")
    ok = False
    for secret in secrets:
        key = secret.encode("utf-8") if isinstance(secret, str) else secret
        ok |= hmac.compare_digest(hmac.digest(key, body, "sha1").hex().encode("ascii"), given)
    if not ok:
        raise SignatureMismatch()
