"""The vault: secret values behind refs, AES-256-GCM encrypted at rest (DESIGN.md §5, issue 4).

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

import base64
import hmac
import logging
import os
import re
import secrets as _random
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import LargeBinary, select
from sqlalchemy.types import TypeDecorator
from sqlmodel import Session

from switchboard import metrics
from switchboard.errors import ConfigError, NotFound, RateLimited, SwitchboardError

if TYPE_CHECKING:
    from switchboard.config import Settings
    from switchboard.hub import Hub
    from switchboard.intake.secrets import MintedRef
    from switchboard.mcp_server.tools import Caller

log = logging.getLogger(__name__)

RECORD_VERSION = 1
KEY_FILE = "vault.keys"
KEY_BYTES = 32
NONCE_BYTES = 12
FETCHES_PER_WINDOW = 30
FETCH_WINDOW_SECONDS = 60.0
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")
_REF = re.compile(r"sec_[A-Za-z0-9_-]{32}")


@dataclass(frozen=True)
class KeyRing:
    """Vault keys by id; ``primary`` encrypts, every key decrypts. ``repr`` shows ids only."""

    keys: dict[str, bytes] = field(repr=False)
    primary: str

    @property
    def ids(self) -> list[str]:
        """Key ids, primary first."""
        return [self.primary, *(k for k in self.keys if k != self.primary)]

    def serialise(self) -> str:
        """The ``SWITCHBOARD_VAULT_KEYS`` form, primary first."""
        return ",".join(f"{kid}:{base64.urlsafe_b64encode(self.keys[kid]).decode()}" for kid in self.ids)


def parse_key_ring(text: str) -> KeyRing:
    """Parse ``<id>:<url-safe base64 of 32 bytes>,...`` (first entry primary).

    Raises:
        ValueError: a malformed entry, a key that is not 32 bytes, a repeated id, or no entry.
            Messages name entries by position and id, never by key material.
    """
    keys: dict[str, bytes] = {}
    primary = None
    for n, entry in enumerate((e.strip() for e in text.split(",")), start=1):
        if not entry:
            continue
        kid, sep, encoded = entry.partition(":")
        if not sep or not _KEY_ID.fullmatch(kid):
            raise ValueError(f"entry {n} must be <id>:<key> with an id of [A-Za-z0-9_-]{{1,40}}")
        try:
            key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except ValueError:
            raise ValueError(f"key {kid!r} is not url-safe base64") from None
        if len(key) != KEY_BYTES:
            raise ValueError(f"key {kid!r} must be {KEY_BYTES} bytes, got {len(key)}")
        if kid in keys:
            raise ValueError(f"key id {kid!r} appears twice")
        keys[kid] = key
        primary = primary or kid
    if primary is None:
        raise ValueError("no keys given")
    return KeyRing(keys, primary)


def new_key_id() -> str:
    """A fresh key id, ``k`` + 8 random hex digits."""
    return "k" + _random.token_hex(4)


def generate_key_ring() -> KeyRing:
    """A ring with one fresh random 256-bit key."""
    kid = new_key_id()
    return KeyRing({kid: AESGCM.generate_key(bit_length=256)}, kid)


def key_file(settings: Settings) -> Path:
    """``<home>/vault.keys``."""
    return Path(settings.home) / KEY_FILE


def _write_key_file(path: Path, ring: KeyRing) -> None:
    """Write the ring atomically with mode 0600 (a temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (ring.serialise() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _create_key_file(path: Path, ring: KeyRing) -> bool:
    """Create the key file only if no other process did first (hard link: atomic, exclusive).

    Two servers starting at once must end up with one ring, never each with its own.

    Returns:
        True when this call created the file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{_random.token_hex(4)}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (ring.serialise() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


_RINGS: dict[tuple[str, str | None], tuple[int, KeyRing]] = {}
_RINGS_LOCK = threading.Lock()


def load_key_ring(settings: Settings, *, fresh: bool = False) -> KeyRing:
    """The process's key ring: ``settings.vault_keys``, else ``<home>/vault.keys`` (created if absent).

    Args:
        settings: the process settings.
        fresh: re-read instead of using the per-process cache (after a rotation).

    Raises:
        ConfigError: the key file is unreadable or malformed.
    """
    cache_key = (str(settings.home), settings.vault_keys)
    # A key file changed by `switchboard vault rotate` in another process is picked up on the
    # next use (one stat() a call), so a running server never seals under a retired key.
    stamp = 0
    if not settings.vault_keys:
        try:
            stamp = key_file(settings).stat().st_mtime_ns
        except OSError:
            stamp = -1
    with _RINGS_LOCK:
        cached = _RINGS.get(cache_key)
        if not fresh and cached is not None and cached[0] == stamp:
            return cached[1]
        if settings.vault_keys:
            ring = parse_key_ring(settings.vault_keys)
        else:
            path = key_file(settings)
            if not settings.is_sqlite:
                log.warning("SWITCHBOARD_VAULT_KEYS is unset with a shared database: every process on every "
                            "host must use the same %s, or set the same SWITCHBOARD_VAULT_KEYS everywhere", path)
            if not path.exists() and _create_key_file(path, generate_key_ring()):
                log.warning("generated a vault key ring in %s (mode 0600); back it up", path)
            try:
                info = path.stat()
                if info.st_mode & 0o077:
                    log.warning("vault key file %s is readable by group or others; chmod 600 it", path)
                ring = parse_key_ring(path.read_text().strip())
                stamp = info.st_mtime_ns
            except (OSError, ValueError) as exc:
                raise ConfigError([f"vault key file {path}: {exc}"]) from None
        _RINGS[cache_key] = (stamp, ring)
        return ring


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
        _write_key_file(key_file(settings), ring)
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
    if unreadable:
        log.error("vault rotate: %d records or bodies are sealed under keys no longer in the ring; "
                  "they were left as they are", len(unreadable))
    retired = [k for k in ring.ids if k != ring.primary]
    if not settings.vault_keys:
        _write_key_file(key_file(settings), KeyRing({ring.primary: ring.keys[ring.primary]}, ring.primary))
    attach(hub.db, lambda: load_key_ring(settings))
    return Rotation(ring.primary, count, retired, sorted(unreadable))


# --- Delivery bodies at rest (DESIGN.md §2) -------------------------------------------------

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
    for engine in {id(db.engine): db.engine, id(db.read_engine): db.read_engine}.values():
        setattr(engine.dialect, _DIALECT_ATTR, ring)


def _dialect_ring(dialect: Any) -> KeyRing | None:
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
        ring = _dialect_ring(dialect)
        if ring is None:
            raise SwitchboardError("refusing to store a delivery body without the vault key ring")
        return seal_body(ring, bytes(value))

    def process_result_value(self, value: bytes | None, dialect: Any) -> bytes | None:
        if value is None:
            return None
        return open_body(_dialect_ring(dialect), bytes(value))


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
    from switchboard import directory
    from switchboard.feed import events as feed
    from switchboard.models import SecretRef

    ref = str(args["ref"])
    LIMITER.check(caller.agent_id, hub.clock.now().timestamp())
    ring = load_key_ring(hub.settings)
    with hub.db.write() as session:
        record = session.get(SecretRef, ref) if _REF.fullmatch(ref) else None
        grants = directory.grants_of(session, caller.agent_id)
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
