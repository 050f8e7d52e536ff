"""Delivery bodies sealed at rest: the :class:`SealedBytes` column type (DESIGN.md §2).

``deliveries.raw_body`` (and relay payloads) are sealed with the primary key on write and
opened on read; the key ring rides on the engine's dialect (:func:`attach`, called when a
:class:`~switchboard.hub.Hub` is built), so two databases in one process keep their own keys.
Stored form: ``MAGIC | len(key id) | key id | nonce | AES-256-GCM(body) + tag``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import LargeBinary
from sqlalchemy.types import TypeDecorator

from switchboard.errors import SwitchboardError
from switchboard.sealing.keys import NONCE_BYTES, KeyRing

BODY_MAGIC = b"\x00SBV1"
_BODY_AAD = b"switchboard/delivery_body/v1"
_DIALECT_ATTR = "switchboard_vault_ring"


def attach(db: Any, ring: KeyRing | Callable[[], KeyRing]) -> None:
    """Give a :class:`~switchboard.db.Database`'s engines the key ring :class:`SealedBytes` uses.

    ``ring`` is a ring, or a zero-argument callable returning the current one (the hub passes
    ``lambda: load_key_ring(settings)`` so a rotation in another process is seen at once). It
    rides on each engine's dialect object, so two databases in one process (tests, tools) each
    keep their own keys.
    """
    for engine in db.engines():
        setattr(engine.dialect, _DIALECT_ATTR, ring)


def dialect_ring(dialect: Any) -> KeyRing | None:
    """The key ring :func:`attach` put on ``dialect`` (calling it when it is a callable), or ``None``."""
    ring = getattr(dialect, _DIALECT_ATTR, None)
    return ring() if callable(ring) else ring


def seal_body(ring: KeyRing, body: bytes) -> bytes:
    """``MAGIC | len(key id) | key id | nonce | AES-256-GCM(body) + tag``."""
    kid = ring.primary.encode()
    nonce = os.urandom(NONCE_BYTES)
    return BODY_MAGIC + bytes([len(kid)]) + kid + nonce + AESGCM(ring.keys[ring.primary]).encrypt(
        nonce, body, _BODY_AAD)


def open_body(ring: KeyRing | None, stored: bytes) -> bytes:
    """Inverse of :func:`seal_body`; bytes without the magic prefix (written before sealing) pass through.

    Raises:
        SwitchboardError: no key ring, an unknown key id, or a body that fails authentication.
    """
    if not stored.startswith(BODY_MAGIC):
        return stored
    if ring is None:
        raise SwitchboardError("a sealed delivery body was read without the vault key ring")
    n = len(BODY_MAGIC)
    klen = stored[n]
    kid = stored[n + 1:n + 1 + klen].decode("ascii", "replace")
    nonce = stored[n + 1 + klen:n + 1 + klen + NONCE_BYTES]
    key = ring.keys.get(kid)
    if key is None:
        raise SwitchboardError("the vault key for this delivery body is not configured")
    try:
        return AESGCM(key).decrypt(nonce, stored[n + 1 + klen + NONCE_BYTES:], _BODY_AAD)
    except InvalidTag:
        raise SwitchboardError("the delivery body could not be decrypted") from None


class SealedBytes(TypeDecorator[bytes]):
    """A ``LargeBinary`` column sealed with the vault on write and opened on read.

    Used for ``deliveries.raw_body``: the raw body may hold secrets, so it is encrypted from
    the moment it is written (DESIGN.md §2). The key ring comes from the engine's dialect
    (:func:`attach`); writing without one fails closed.
    """

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: bytes | None, dialect: Any) -> bytes | None:
        if value is None:
            return None
        ring = dialect_ring(dialect)
        if ring is None:
            raise SwitchboardError("refusing to store a delivery body without the vault key ring")
        return seal_body(ring, bytes(value))

    def process_result_value(self, value: bytes | None, dialect: Any) -> bytes | None:
        if value is None:
            return None
        return open_body(dialect_ring(dialect), bytes(value))
