"""Text columns sealed with the vault key ring: source verification secrets (issue 13 item 5).

A source's secret lets whoever reads it forge deliveries, so it is stored as
``sbv1:<url-safe base64 of key id | nonce | AES-256-GCM(secret) + tag>``, associated data
``switchboard/source_secret/v1`` (the same construction as sealed delivery bodies,
:func:`switchboard.sealing.columns.seal_body`). Values without the prefix (written before
migration 0009) read as they are; the migration seals them in place and ``switchboard vault
rotate`` re-seals every one under the new primary key.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import Text
from sqlalchemy.types import TypeDecorator

from switchboard.errors import SwitchboardError
from switchboard.sealing.columns import dialect_ring
from switchboard.sealing.keys import NONCE_BYTES, KeyRing

PREFIX = "sbv1:"
_AAD = b"switchboard/source_secret/v1"


def seal_text(ring: KeyRing, value: str) -> str:
    """Seal ``value`` under the ring's primary key; returns the stored form."""
    kid = ring.primary.encode()
    nonce = os.urandom(NONCE_BYTES)
    sealed = AESGCM(ring.keys[ring.primary]).encrypt(nonce, value.encode("utf-8"), _AAD)
    return PREFIX + base64.urlsafe_b64encode(bytes([len(kid)]) + kid + nonce + sealed).decode("ascii")


def key_id_of(stored: str) -> str | None:
    """The key id a stored value is sealed under (``None`` for a clear legacy value)."""
    if not stored.startswith(PREFIX):
        return None
    raw = base64.urlsafe_b64decode(stored[len(PREFIX):])
    return raw[1:1 + raw[0]].decode("ascii", "replace")


def open_text(ring: KeyRing | None, stored: str) -> str:
    """Inverse of :func:`seal_text`; a value without the prefix passes through.

    Raises:
        SwitchboardError: no ring, unknown key id, or a value that fails authentication.
    """
    if not stored.startswith(PREFIX):
        return stored
    if ring is None:
        raise SwitchboardError("a sealed source secret was read without the vault key ring")
    try:
        raw = base64.urlsafe_b64decode(stored[len(PREFIX):])
        klen = raw[0]
        kid = raw[1:1 + klen].decode("ascii")
        nonce = raw[1 + klen:1 + klen + NONCE_BYTES]
        key = ring.keys.get(kid)
        if key is None:
            raise SwitchboardError("the vault key for this source secret is not configured")
        return AESGCM(key).decrypt(nonce, raw[1 + klen + NONCE_BYTES:], _AAD).decode("utf-8")
    except (InvalidTag, ValueError, IndexError):
        raise SwitchboardError("a source secret could not be decrypted") from None


class SealedText(TypeDecorator[str]):
    """A ``Text`` column sealed on write and opened on read with the engine's key ring
    (:func:`switchboard.sealing.columns.attach`); writing without a ring fails closed."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        if value is None or value.startswith(PREFIX):
            return value
        ring = dialect_ring(dialect)
        if ring is None:
            raise SwitchboardError("refusing to store a source secret without the vault key ring")
        return seal_text(ring, value)

    def process_result_value(self, value: str | None, dialect: Any) -> str | None:
        if value is None:
            return None
        return open_text(dialect_ring(dialect), value)
