"""The vault: secret values behind refs, AES-256-GCM encrypted at rest (DESIGN.md §5, issue 4).

The primitives (key ring, AES-GCM records, the sealed column types) are in
:mod:`switchboard.sealing`, below the models and settings; this module stores, rotates and
fetches with them.

- **Cipher**: AES-256-GCM from ``cryptography`` (``AESGCM``), a fresh 12-byte random nonce per
  record, the 16-byte tag appended to the ciphertext. The associated data binds the record
  format version, the ref and the project (``switchboard/secret_ref/v1|<ref>|<project_id>``),
  so a ciphertext copied onto another ref or project fails to open.
- **Key ring**: ``SWITCHBOARD_VAULT_KEYS`` = ``<id>:<key>,<id>:<key>,...``, each key 32 bytes in
  url-safe base64, the first one primary (new records use it; the others only decrypt). Unset,
  the ring lives in ``<home>/vault.keys``, generated on first use with mode 0600.
- **Rotation** (``switchboard vault rotate``): with the file ring, a new primary key is
  generated, every record and stored delivery body is re-encrypted under it in one
  transaction, and the old keys are removed from the file. With ``SWITCHBOARD_VAULT_KEYS``, put the new key first, run the
  command (it re-encrypts every record under the primary), then drop the retired ids it names.
- **Delivery bodies** (:class:`SealedBytes`, the type of ``deliveries.raw_body``): sealed with
  the primary key on write, opened on read; the ring rides on the engine (:func:`attach`,
  called when a :class:`~switchboard.hub.Hub` is built).
- **Fetching** (:func:`fetch_tool`, the ``secret_fetch`` tool): only an agent with ``work`` on
  the ref's project gets the value; an unknown or foreign ref is the same ``not_found``; every
  fetch writes a ``secret.fetched`` feed event naming the agent and the ref, never the value;
  each agent may fetch :data:`FETCHES_PER_WINDOW` times per :data:`FETCH_WINDOW_SECONDS`
  (per process), beyond which calls fail with ``rate_limited``.

Nothing here logs or raises with a value or key material in the message.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import Text, select
from sqlalchemy import cast as sa_cast
from sqlmodel import Session

from switchboard import metrics
from switchboard.errors import NotFound, RateLimited, SwitchboardError

# The primitives live below the models and settings (:mod:`switchboard.sealing`); they are
# re-exported here because callers think of them as the vault's (``vault.load_key_ring``).
from switchboard.sealing.columns import BODY_MAGIC, SealedBytes, attach, open_body, seal_body
from switchboard.sealing.keys import (
    KEY_BYTES,
    KEY_FILE,
    NONCE_BYTES,
    KeyRing,
    generate_key_ring,
    key_file,
    load_key_ring,
    new_key_id,
    parse_key_ring,
    write_key_file,
)
from switchboard.sealing.records import RECORD_VERSION, open_record, seal

if TYPE_CHECKING:
    from switchboard.hub import Hub
    from switchboard.intake.secrets import MintedRef
    from switchboard.mcp_server.specs import Caller

__all__ = [
    "BODY_MAGIC", "FETCHES_PER_WINDOW", "FETCH_WINDOW_SECONDS", "KEY_BYTES", "KEY_FILE", "LIMITER", "NONCE_BYTES",
    "RECORD_VERSION", "FetchLimiter", "KeyRing", "Rotation", "SealedBytes", "attach", "fetch_tool",
    "generate_key_ring", "key_file", "load_key_ring", "new_key_id", "open_body", "open_record",
    "parse_key_ring", "render_fetch", "rotate", "seal", "seal_body", "store",
]

log = logging.getLogger(__name__)

FETCHES_PER_WINDOW = 30
FETCH_WINDOW_SECONDS = 60.0
_REF = re.compile(r"sec_[A-Za-z0-9_-]{32}")


def store(session: Session, ring: KeyRing, project_id: str, delivery_id: str | None,
          refs: Iterable[MintedRef], now: datetime) -> int:
    """Seal and insert minted refs in the caller's transaction (existing refs are left alone).

    Returns:
        How many records were written.
    """
    from switchboard.models import SecretRef

    written = 0
    for minted in refs:
        if session.get(SecretRef, minted.ref) is not None:
            continue
        key_id, nonce, sealed = seal(ring, minted.ref, project_id, minted.value)
        session.add(SecretRef(ref=minted.ref, project_id=project_id, delivery_id=delivery_id,
                              kind=minted.kind[:60], version=RECORD_VERSION, key_id=key_id, nonce=nonce,
                              ciphertext=sealed, created_at=now))
        written += 1
    return written


@dataclass(frozen=True)
class Rotation:
    """What :func:`rotate` did: the new primary, records re-encrypted, key ids retired, and the
    refs or delivery ids that could not be opened (sealed under a key already gone)."""

    primary: str
    re_encrypted: int
    retired: list[str]
    unreadable: list[str] = field(default_factory=list)
    source_secrets: int = 0
    """Source verification secrets re-sealed under the new primary (issue 13 item 5)."""


def rotate(hub: Hub) -> Rotation:
    """Re-encrypt every record under a primary key and retire the others.

    With the file ring (``SWITCHBOARD_VAULT_KEYS`` unset): generate a new primary, write
    ``new,old…`` to the key file, re-encrypt every record in one transaction, then write the
    file with the new key only. A crash in between leaves a file that opens every record.
    With ``SWITCHBOARD_VAULT_KEYS``: re-encrypt under its primary; the returned ``retired``
    ids are no longer needed and may be removed from the variable.
    """
    from sqlalchemy.orm.attributes import flag_modified

    from switchboard.models import Delivery, SecretRef

    settings = hub.settings
    current = load_key_ring(settings, fresh=True)
    if settings.vault_keys:
        ring = current
    else:
        kid = new_key_id()
        ring = KeyRing({kid: AESGCM.generate_key(bit_length=256), **current.keys}, kid)
        write_key_file(key_file(settings), ring)
    attach(hub.db, ring)
    count = 0
    unreadable: set[str] = set()
    now = hub.clock.now()
    # Two passes: the second catches records another process sealed under an old primary just
    # before it saw the new key file.
    for _ in range(2):
        with hub.db.write() as session:
            for record in session.execute(select(SecretRef)).scalars():
                if record.key_id == ring.primary or record.ref in unreadable:
                    continue
                try:
                    value = open_record(ring, record)
                except SwitchboardError:
                    unreadable.add(record.ref)  # its key is gone already; keep going, report it
                    continue
                record.key_id, record.nonce, record.ciphertext = seal(ring, record.ref, record.project_id, value)
                record.version, record.rotated_at = RECORD_VERSION, now
                count += 1
    with hub.db.write() as session:
        bodies = session.execute(
            select(Delivery.id).where(Delivery.raw_body.is_not(None))  # type: ignore[call-overload,union-attr]
        ).scalars().all()
        for delivery_id in bodies:
            try:
                delivery = session.get(Delivery, delivery_id)
                if delivery is not None and delivery.raw_body is not None:
                    delivery.raw_body = bytes(delivery.raw_body)  # opened with any key, sealed with the primary
                    flag_modified(delivery, "raw_body")
            except SwitchboardError:
                unreadable.add(delivery_id)
    from switchboard.models import SourceSecret
    from switchboard.sealing.text import key_id_of, open_text, seal_text

    sources = 0
    with hub.db.write() as session:  # source secrets (issue 13 item 5), read as stored, re-sealed
        table = SourceSecret.__table__  # type: ignore[attr-defined]
        for sid, stored in session.execute(select(table.c.id, sa_cast(table.c.secret, Text))).all():
            if key_id_of(stored) == ring.primary:
                continue
            try:
                value = open_text(ring, stored)
            except SwitchboardError:
                unreadable.add(sid)
                continue
            session.execute(table.update().where(table.c.id == sid).values(secret=seal_text(ring, value)))
            sources += 1
    if unreadable:
        log.error("vault rotate: %d records or bodies are sealed under keys no longer in the ring; "
                  "they were left as they are", len(unreadable))
    retired = [k for k in ring.ids if k != ring.primary]
    if not settings.vault_keys:
        write_key_file(key_file(settings), KeyRing({ring.primary: ring.keys[ring.primary]}, ring.primary))
    attach(hub.db, lambda: load_key_ring(settings))
    return Rotation(ring.primary, count, retired, sorted(unreadable), sources)


class FetchLimiter:
    """A sliding-window limit per agent: ``limit`` calls per ``window`` seconds (in this process)."""

    def __init__(self, limit: int = FETCHES_PER_WINDOW, window: float = FETCH_WINDOW_SECONDS) -> None:
        self.limit, self.window = limit, window
        self._calls: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, agent_id: str, now: float) -> None:
        """Count one call.

        Raises:
            RateLimited: the agent already made ``limit`` calls in the window.
        """
        with self._lock:
            calls = self._calls.setdefault(agent_id, deque())
            while calls and calls[0] <= now - self.window:
                calls.popleft()
            if len(calls) >= self.limit:
                raise RateLimited(f"at most {self.limit} secret fetches per {int(self.window)} s; retry later")
            calls.append(now)


LIMITER = FetchLimiter()


def fetch_tool(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    """The ``secret_fetch`` tool: ``{ref}`` → ``{ref, value}`` for an agent with ``work`` on its project.

    Raises:
        RateLimited: too many fetches by this agent.
        NotFound: unknown ref, malformed ref, or a ref of a project the agent may not work on
            (the same error for all three).
    """
    from switchboard import admin
    from switchboard.feed import events as feed
    from switchboard.models import SecretRef

    ref = str(args["ref"])
    LIMITER.check(caller.agent_id, hub.clock.now().timestamp())
    ring = load_key_ring(hub.settings)
    with hub.db.write() as session:
        record = session.get(SecretRef, ref) if _REF.fullmatch(ref) else None
        grants = admin.grants_of(session, caller.agent_id)
        allowed = record is not None and hmac.compare_digest(grants.get(record.project_id, ""), "work")
        if record is None or not allowed:
            raise NotFound("no such secret ref")
        value = open_record(ring, record)
        feed.append(session, hub.clock, record.project_id, "secret.fetched",
                    f"Secret {ref} ({record.kind}) fetched by agent {caller.agent_name}",
                    subject_id=ref, data={"ref": ref, "kind": record.kind, "agent_id": caller.agent_id,
                                          "agent": caller.agent_name})
    metrics.vault_fetched()
    return {"ref": ref, "value": value}


def render_fetch(result: dict[str, Any]) -> str:
    """Text rendering of a fetch: the value, for the agent that asked for it."""
    return f"secret {result['ref']}: {result['value']}"
