"""Discord interactions: Ed25519 over ``X-Signature-Timestamp`` bytes + raw body bytes.

``X-Signature-Ed25519`` is the 64-byte signature as 128 hex digits; the key is the
application's 32-byte public key (64 hex digits, from the Developer Portal). Discord
probes endpoints with bad signatures and expects 401. Ed25519 comes from ``cryptography``.

Discord publishes no replay window; the timestamp is checked for syntax only.

Source: https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from switchboard.verifiers import SignatureMalformed, SignatureMismatch, SignatureMissing, timestamp

_SIGNATURE = re.compile(r"[0-9a-fA-F]{128}")
_PUBLIC_KEY = re.compile(r"[0-9a-fA-F]{64}")


def load_public_key(hex_key: str) -> Ed25519PublicKey:
    """Load a 64-hex-digit Ed25519 public key.

    Raises:
        ValueError: not exactly 64 hex digits, or not a valid curve point.
    """
    if not _PUBLIC_KEY.fullmatch(hex_key):
        raise ValueError("an Ed25519 public key is 64 hex digits")
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key))


def verify_ed25519(message: bytes, signature: bytes, keys: Sequence[Ed25519PublicKey]) -> None:
    """Verify ``signature`` over ``message`` with any of ``keys``.

    Raises:
        SignatureMismatch: no key verifies it.
    """
    for key in keys:
        try:
            key.verify(signature, message)
            return
        except InvalidSignature:
            continue
    raise SignatureMismatch()


def verify(body: bytes, headers: Mapping[str, str], public_keys: Sequence[str]) -> None:
    """Verify a Discord interaction request.

    Args:
        body: the exact request bytes.
        headers: request headers with lower-case names.
        public_keys: the application's public keys as hex (validated when configured).

    Raises:
        SignatureMissing: a header is absent.
        SignatureMalformed: the timestamp is not digits or the signature is not 128 hex digits.
        SignatureMismatch: no key verifies the signature.
    """
    signature = headers.get("x-signature-ed25519")
    if not signature:
        raise SignatureMissing()
    raw_ts = headers.get("x-signature-timestamp")
    timestamp.parse(raw_ts, "X-Signature-Timestamp")
    if not _SIGNATURE.fullmatch(signature.strip()):
        raise SignatureMalformed("X-Signature-Ed25519 must be 128 hex digits")
    keys = []
    for hex_key in public_keys:
        try:
            keys.append(load_public_key(hex_key))
        except ValueError:
            continue  # refused at configuration time; never fail a request over it
    verify_ed25519(str(raw_ts).encode("ascii") + body, bytes.fromhex(signature.strip()), keys)
