"""The vault key ring: ids to 256-bit keys, the first primary (DESIGN.md §5, issue 4).

``SWITCHBOARD_VAULT_KEYS`` = ``<id>:<key>,<id>:<key>,...``, each key 32 bytes in url-safe
base64, the first one primary (new records use it; the others only decrypt). Unset, the ring
lives in ``<home>/vault.keys``, generated on first use with mode 0600, and a change to that
file by another process (``switchboard vault rotate``) is seen on the next use. Nothing here
logs or raises with key material in the message.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import secrets as _random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from switchboard.errors import ConfigError

if TYPE_CHECKING:
    from switchboard.config import Settings

log = logging.getLogger(__name__)

KEY_FILE = "vault.keys"
KEY_BYTES = 32
NONCE_BYTES = 12
"""AES-GCM nonce length in bytes (a fresh random one per sealed value)."""
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")


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
    return Path(key_file_name(str(settings.home)))


def key_file_name(home: str) -> str:
    """:func:`key_file` as a ``str`` from the home folder's: for :func:`load_key_ring`'s stat on
    every use, where building a ``Path`` cost 4 times the system call (issue 11)."""
    return os.path.join(home, KEY_FILE)


def write_key_file(path: Path, ring: KeyRing) -> None:
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
    home = str(settings.home)
    cache_key = (home, settings.vault_keys)
    # A key file changed by `switchboard vault rotate` in another process is picked up on the
    # next use (one stat() a call: a seal in the delivery writer and an open in processing per
    # delivery), so a running server never seals under a retired key.
    stamp = 0
    if not settings.vault_keys:
        try:
            stamp = os.stat(key_file_name(home)).st_mtime_ns
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
