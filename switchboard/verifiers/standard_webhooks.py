"""Standard Webhooks (and Svix): ``v1`` HMAC-SHA256 and ``v1a`` Ed25519 signatures.

Signed content: ``<webhook-id>.<webhook-timestamp>.<raw body>``. ``webhook-signature`` is a
space-separated list of ``<version>,<base64 signature>`` entries; any ``v1`` (HMAC) or ``v1a``
(Ed25519) entry may match, unknown versions and broken entries are skipped
(webhook-faults.md #9). Svix sends the same scheme under ``svix-id`` / ``svix-timestamp`` /
``svix-signature``. The timestamp must be within 300 s either way (fault #11).

Keys (validated when a source is configured, :func:`parse_key`):

- ``whsec_<base64>`` (or the bare base64): the HMAC key is the base64-*decoded* bytes,
  at least 24 bytes (fault #8). Stripe-style use of the whole text as the key is wrong here.
- ``whpk_<base64>``: a 32-byte Ed25519 public key for ``v1a``.

Sources: https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
and https://docs.svix.com/receiving/verifying-payloads/how-manual
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from switchboard.clock import Clock
from switchboard.verifiers import SignatureMalformed, SignatureMismatch, SignatureMissing, timestamp
from switchboard.verifiers.discord_signature import verify_ed25519

SECRET_PREFIX = "whsec_"
PUBLIC_KEY_PREFIX = "whpk_"
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_ID = re.compile(r"[\x21-\x7e]{1,256}")


@dataclass(frozen=True)
class Key:
    """A parsed key: ``kind`` is ``hmac`` (``v1``) or ``ed25519`` (``v1a``)."""

    kind: str
    material: bytes


def _b64(text: str) -> bytes:
    if not _B64.fullmatch(text) or len(text) % 4:
        raise ValueError("not strict base64")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not strict base64") from None


def parse_key(text: str) -> Key:
    """Parse a configured secret or public key.

    Raises:
        ValueError: with a reason (never the key): bad prefix, bad base64, wrong length.
    """
    if text.startswith(PUBLIC_KEY_PREFIX):
        try:
            raw = _b64(text[len(PUBLIC_KEY_PREFIX):])
        except ValueError:
            raise ValueError("a whpk_ public key must be strict base64 after the prefix") from None
        if len(raw) != 32:
            raise ValueError("a whpk_ public key must decode to 32 bytes (Ed25519)")
        Ed25519PublicKey.from_public_bytes(raw)
        return Key("ed25519", raw)
    body = text[len(SECRET_PREFIX):] if text.startswith(SECRET_PREFIX) else text
    try:
        raw = _b64(body)
    except ValueError:
        raise ValueError("a Standard Webhooks secret is 'whsec_' + strict base64 (e.g. not 'v1,whsec_...')") from None
    if not MIN_SECRET_BYTES <= len(raw) <= MAX_SECRET_BYTES:
        raise ValueError(f"a Standard Webhooks secret must decode to {MIN_SECRET_BYTES}-{MAX_SECRET_BYTES} bytes")
    return Key("hmac", raw)


def sign(msg_id: str, ts: int | str, body: bytes, secret: str) -> str:
    """A ``v1,<base64>`` signature entry (for tests and tools)."""
    key = parse_key(secret)
    content = f"{msg_id}.{ts}.".encode("ascii") + body
    return "v1," + base64.b64encode(hmac.new(key.material, content, hashlib.sha256).digest()).decode("ascii")


def header_names(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """The ``(id, timestamp, signature)`` header names in use: ``webhook-*``, else ``svix-*``."""
    if "webhook-id" in headers or "webhook-signature" in headers or "webhook-timestamp" in headers:
        return "webhook-id", "webhook-timestamp", "webhook-signature"
    return "svix-id", "svix-timestamp", "svix-signature"


def message_id(headers: Mapping[str, str]) -> str | None:
    """The message id (the dedup key, DESIGN.md §6.1), or ``None``."""
    value = headers.get(header_names(headers)[0], "").strip()
    return value[:256] or None


def verify(body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
           tolerance: int = timestamp.DEFAULT_TOLERANCE_SECONDS) -> None:
    """Verify a Standard Webhooks / Svix request.

    Args:
        body: the exact request bytes.
        headers: request headers with lower-case names.
        secrets: configured keys (``whsec_``/bare base64 for ``v1``, ``whpk_`` for ``v1a``).
        clock: the injected clock.
        tolerance: the replay window in seconds (both ways).

    Raises:
        SignatureMissing: the id, timestamp or signature header is absent.
        SignatureMalformed: the id has spaces/controls or the timestamp is not digits.
        TimestampOutOfWindow: more than ``tolerance`` seconds away.
        SignatureMismatch: no entry of the list matches any key.
    """
    id_name, ts_name, sig_name = header_names(headers)
    msg_id = headers.get(id_name)
    signatures = headers.get(sig_name)
    if not msg_id or not signatures:
        raise SignatureMissing()
    if not _ID.fullmatch(msg_id):
        raise SignatureMalformed(f"{id_name} must be 1-256 printable ASCII characters")
    raw_ts = headers.get(ts_name)
    ts = timestamp.parse(raw_ts, ts_name)
    timestamp.check_window(ts, clock, tolerance)

    hmac_keys: list[bytes] = []
    ed_keys: list[Ed25519PublicKey] = []
    for text in secrets:
        try:
            key = parse_key(text)
        except ValueError:
            continue  # refused at configuration time; never fail a request over it
        if key.kind == "hmac":
            hmac_keys.append(key.material)
        else:
            ed_keys.append(Ed25519PublicKey.from_public_bytes(key.material))
    content = f"{msg_id}.{raw_ts}.".encode("ascii") + body
    expected = [hmac.digest(k, content, "sha256") for k in hmac_keys]

    ok = False
    for entry in signatures.split(" "):
        version, sep, value = entry.partition(",")
        if not sep:
            continue
        try:
            given = _b64(value)
        except ValueError:
            continue
        if version == "v1":
            for digest in expected:
                ok |= hmac.compare_digest(digest, given)
        elif version == "v1a" and ed_keys and len(given) == 64:
            try:
                verify_ed25519(content, given, ed_keys)
                ok = True
            except SignatureMismatch:
                pass
    if not ok:
        raise SignatureMismatch()
