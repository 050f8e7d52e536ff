"""Secret ref records: AES-256-GCM with the ref and project as associated data (DESIGN.md §5).

A fresh 12-byte random nonce per record, the 16-byte tag appended to the ciphertext. The
associated data binds the record format version, the ref and the project
(``switchboard/secret_ref/v1|<ref>|<project_id>``), so a ciphertext copied onto another ref or
project fails to open. Messages name the ref only, never the value.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from switchboard.errors import SwitchboardError
from switchboard.sealing.keys import NONCE_BYTES, KeyRing

log = logging.getLogger(__name__)

RECORD_VERSION = 1


def _aad(version: int, ref: str, project_id: str) -> bytes:
    return f"switchboard/secret_ref/v{version}|{ref}|{project_id}".encode()


def seal(ring: KeyRing, ref: str, project_id: str, value: str) -> tuple[str, bytes, bytes]:
    """Encrypt ``value`` under the primary key.

    Returns:
        ``(key_id, nonce (12 bytes), ciphertext with the 16-byte tag appended)``.
    """
    nonce = os.urandom(NONCE_BYTES)
    sealed = AESGCM(ring.keys[ring.primary]).encrypt(nonce, value.encode("utf-8", "surrogatepass"),
                                                     _aad(RECORD_VERSION, ref, project_id))
    return ring.primary, nonce, sealed


def open_record(ring: KeyRing, record: Any) -> str:
    """Decrypt a :class:`~switchboard.models.SecretRef` row.

    Raises:
        SwitchboardError: the key is not in the ring, or the record fails authentication
            (tampered, or moved to another ref or project). The message names the ref only.
    """
    key = ring.keys.get(record.key_id)
    if key is None:
        log.error("secret %s is sealed under key %s, which is not in the vault key ring", record.ref,
                  record.key_id)
        raise SwitchboardError("the vault key for this secret is not configured")
    try:
        plain = AESGCM(key).decrypt(record.nonce, record.ciphertext,
                                    _aad(record.version, record.ref, record.project_id))
    except InvalidTag:
        log.error("secret %s failed authentication (tampered or moved)", record.ref)
        raise SwitchboardError("the secret could not be decrypted") from None
    return plain.decode("utf-8", "surrogatepass")
