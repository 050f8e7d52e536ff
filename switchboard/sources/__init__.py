"""Source adapters: one module per provider (DESIGN.md §4, §6.1).

An adapter is framework-free: it verifies raw bytes with a scheme from
:mod:`switchboard.verifiers`, parses the verified body into an :class:`Envelope`, names the
dedup key and the sender, and gives the handshake reply a provider requires. The receiver and
the processing job are thin shells around it.
"""

from __future__ import annotations

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
        handshake: the JSON reply a handshake requires (the delivery is not work then).
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


class SourceAdapter(Protocol):
    """What every provider module offers."""

    provider: str

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock) -> None:
        """Verify ``body`` (exact bytes) with ``headers`` (lower-case names); raise on failure."""
        ...

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """The delivery's dedup key (DESIGN.md §6.1), or ``None`` when the request has none."""
        ...

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified body; raise ``MalformedPayload`` when it does not parse."""
        ...

    def validate_secret(self, secret: str) -> None:
        """Refuse a secret this scheme cannot use (at configuration time, never per request)."""
        ...


def adapter_for(provider: str) -> SourceAdapter:
    """Return the adapter for ``provider``.

    Raises:
        InvalidArgument: unknown provider.
    """
    from switchboard.sources import github

    adapters: dict[str, SourceAdapter] = {"github": github.ADAPTER}
    try:
        return adapters[provider]
    except KeyError:
        raise InvalidArgument(
            f"unknown provider {provider!r}; known: {', '.join(sorted(adapters))}"
        ) from None


PROVIDERS = ("github",)
