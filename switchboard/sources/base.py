"""What every adapter shares: :class:`Envelope`, :class:`Sender`, the :class:`SourceAdapter`
protocol and the :class:`BaseSource` defaults (DESIGN.md §4, §6.1).

Provider modules import this module, never the package (whose registry imports them).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument


@dataclass(frozen=True)
class Sender:
    """Who sent a delivery, by the provider's stable ids (DESIGN.md §1, §5).

    Attributes:
        provider: e.g. ``github``.
        workspace: the provider's tenant (Slack team id), ``""`` where there is none.
        external_id: the stable user id as a string (GitHub ``sender.id``).
        login: a display handle, for humans reading lists only; never used to attribute.
        is_bot: the provider marks the sender as a bot.
    """

    provider: str
    workspace: str
    external_id: str
    login: str | None = None
    is_bot: bool = False


@dataclass(frozen=True)
class Envelope:
    """A verified, parsed delivery.

    Attributes:
        event: the provider's event name (``issues``, ``ping``).
        action: the event's action, if any (``opened``).
        payload: the parsed JSON object.
        sender: the sender, when the payload names one.
        title: a one-line title when the event is work for agents, else ``None``.
        summary: a one-line description for the feed when it is not work.
        handshake: the JSON reply a handshake requires (Slack ``url_verification``, Discord
            PING); the receiver answers 200 with it after verifying and stores nothing.
    """

    event: str
    action: str | None
    payload: dict[str, Any]
    sender: Sender | None = None
    title: str | None = None
    summary: str | None = None
    handshake: dict[str, Any] | None = field(default=None)

    @property
    def kind(self) -> str:
        """``event.action`` (or ``event``), e.g. ``issues.opened``."""
        return f"{self.event}.{self.action}" if self.action else self.event


@dataclass(frozen=True)
class SourceOptions:
    """The per-source settings a verifier may need, read from the ``sources`` row.

    Every adapter's :meth:`SourceAdapter.verify` takes them, so the receiver calls one
    signature for every provider; an adapter ignores the options that are not its own.

    Attributes:
        allow_legacy_sha1: GitHub only: also accept a request carrying only the legacy
            ``X-Hub-Signature`` (SHA-1) when no ``X-Hub-Signature-256`` is sent.
    """

    allow_legacy_sha1: bool = False

    @classmethod
    def of(cls, source: Any) -> SourceOptions:
        """The options of a ``Source`` row (or anything with the same attributes)."""
        return cls(allow_legacy_sha1=bool(getattr(source, "allow_legacy_sha1", False)))


NO_OPTIONS = SourceOptions()
"""Defaults: what a source added without options has."""


SOURCE_SENDER = "@source"
"""External id an adapter uses when the sender is the source itself (Standard Webhooks): the
processing job replaces it with the source's id, so a human vouches for one source."""


class SourceAdapter(Protocol):
    """What every provider module offers."""

    provider: str
    generates_secret: bool
    """True when Switchboard may generate the secret; False when the provider issues it."""
    admits_in_writer: bool
    """True when the receiver's answer never depends on the payload (no handshake, no reply
    body): :meth:`admit` then runs in the delivery writer, off the event loop (issue 11)."""

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify ``body`` (exact bytes) with ``headers`` (lower-case names); raise on failure.

        Args:
            body: The raw request body, exactly as received.
            headers: Request headers with lower-case names.
            secrets: Every currently valid secret of the source (rotation: any may match).
            clock: For schemes with a timestamp window.
            options: The source's own settings (:class:`SourceOptions`).

        Raises:
            VerificationFailed: missing, malformed or mismatched signature, or a stale timestamp.
        """
        ...

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """The delivery's dedup key (DESIGN.md §6.1), or ``None`` when the request has none."""
        ...

    def body_digest(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """SHA-256 (hex) of the raw body for replay dedup, or ``None`` for timestamped schemes."""
        ...

    def health_check(self, body: bytes, headers: Mapping[str, str]) -> bool:
        """True when the request is exactly the provider's unsigned health check (answered 200)."""
        ...

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified body; raise ``MalformedPayload`` when it does not parse."""
        ...

    def admit(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """The receiver's parse: what :meth:`parse` accepts and refuses, with its event, action
        and handshake; title, summary and sender may be left unset."""
        ...

    def validate_secret(self, secret: str) -> None:
        """Refuse a secret this scheme cannot use (at configuration time, never per request)."""
        ...

    def new_secret(self) -> str:
        """A fresh random secret in this scheme's format (only when ``generates_secret``)."""
        ...

    def accept_reply(self, envelope: Envelope, delivery_id: str) -> dict[str, Any] | None:
        """The JSON body a provider needs with the ack (sent as 200), or ``None`` for 202."""
        ...

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """Refuse an identity that can never match this provider's senders (``identity link``)."""
        ...

    def normalize_identity(self, workspace: str, external_id: str) -> tuple[str, str]:
        """The ``(workspace, external_id)`` as the adapter's :class:`Sender` writes them."""
        ...


class BaseSource:
    """Defaults shared by the adapters: a generated url-safe secret, no ack body, any id,
    replay dedup on the body digest, no health check."""

    provider = ""
    generates_secret = True
    secret_help = "the webhook secret"
    replay_window = False
    """True when the scheme signs a timestamp checked against a window (Slack, Standard
    Webhooks): a captured request dies with the window, so no body digest is needed."""
    admits_in_writer = True
    """The delivery writer (its thread or process, :func:`switchboard.web.ingest.write_batch`)
    runs :meth:`admit` and :meth:`body_digest` before its transaction, not the event loop:
    together about a quarter of the receiver's time per delivery on the loop (issue 11). False
    for the adapters whose answer depends on the payload (a handshake, a reply body: Slack,
    Discord, Teams), which the receiver admits itself."""

    def body_digest(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """SHA-256 (hex) of the exact body, for schemes without a signed timestamp.

        A signature that covers no timestamp and no delivery id (GitHub, Gitea, Teams, GitLab's
        secret token, ...) lets anyone who captured one delivery send it again with a fresh
        delivery header; the digest, unique per source while the delivery row is kept, makes
        that replay a duplicate (issue 12 #7). ``None`` where :attr:`replay_window` is set.
        """
        if self.replay_window:
            return None
        return hashlib.sha256(body).hexdigest()

    def health_check(self, body: bytes, headers: Mapping[str, str]) -> bool:
        """No unsigned health check by default."""
        return False

    def admit(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """The receiver's parse of a verified body (DESIGN.md §6.1: 400 ``malformed_payload``
        before the ack): refuses exactly what :meth:`parse` refuses, with the same ``kind`` and
        ``handshake``, but may leave ``title``, ``summary`` and ``sender`` unset. Processing
        parses the stored body again for those, so the receiver need not build them: for a
        5 KB GitHub issue they were a third of the parse (issue 11). By default, :meth:`parse`.
        Run by the delivery writer before its transaction when :attr:`admits_in_writer` is set
        (:func:`switchboard.web.ingest.admit_row`), by the receiver on the event loop otherwise.

        Raises:
            MalformedPayload, MalformedRequest: as :meth:`parse`.
        """
        return self.parse(body, headers)  # type: ignore[attr-defined, no-any-return]

    def new_secret(self) -> str:
        """32 random bytes, url-safe base64 without padding."""
        return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii").rstrip("=")

    def accept_reply(self, envelope: Envelope, delivery_id: str) -> dict[str, Any] | None:
        """No reply body: the receiver answers 202 ``{delivery_id, status}``."""
        return None

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """Any non-empty id is acceptable by default."""

    def normalize_identity(self, workspace: str, external_id: str) -> tuple[str, str]:
        """Unchanged by default."""
        return workspace, external_id

    def validate_free_text_secret(self, secret: str, max_chars: int = 256) -> None:
        """Free-text secrets: non-empty, printable ASCII, no surrounding spaces.

        Raises:
            InvalidArgument: empty, padded, non-printable or over ``max_chars``.
        """
        if not secret or secret.strip() != secret:
            raise InvalidArgument(f"{self.secret_help} must be non-empty, without surrounding spaces")
        if len(secret) > max_chars:
            raise InvalidArgument(f"{self.secret_help} must be at most {max_chars} characters")
        if not all(0x20 < ord(c) < 0x7F for c in secret):
            raise InvalidArgument(f"{self.secret_help} must be printable ASCII without spaces")
