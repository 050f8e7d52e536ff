"""Standard Webhooks and Svix senders (any service that signs this way).

- Verification: ``v1`` HMAC (``whsec_`` secret) and ``v1a`` Ed25519 (``whpk_`` public key),
  ``webhook-*`` or ``svix-*`` headers, signature lists, ±300 s
  (:mod:`switchboard.verifiers.standard_webhooks`).
- Dedup key: ``webhook-id`` (``svix-id``).
- Sender: the service itself, i.e. the source. A human vouches for it with
  ``identity link --provider standard_webhooks --external-id <source id>``; until then its
  messages are quarantined like any unknown sender.
- Work: every message, titled by its ``type``.

Source: https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping, Sequence

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
from switchboard.sources.base import NO_OPTIONS, SOURCE_SENDER, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import load_json_object, one_line, text
from switchboard.verifiers import standard_webhooks

_SOURCE_ID = re.compile(r"src_[a-z2-7]{10,60}")


class StandardWebhooksSource(BaseSource):
    """The Standard Webhooks / Svix adapter (see module docstring)."""

    provider = "standard_webhooks"
    secret_help = "a Standard Webhooks secret"
    replay_window = True

    def new_secret(self) -> str:
        """``whsec_`` + base64 of 32 random bytes."""
        return standard_webhooks.SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode("ascii")

    def validate_secret(self, secret: str) -> None:
        """``whsec_<base64>`` (or bare base64) of 24-64 bytes, or ``whpk_<base64>`` of 32 bytes.

        Raises:
            InvalidArgument: e.g. ``v1,whsec_...`` pasted, bad base64, or too short
                (webhook-faults.md #8).
        """
        try:
            standard_webhooks.parse_key(secret)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """The sender is a source: external id = the source id, no workspace.

        Raises:
            InvalidArgument: otherwise.
        """
        if not _SOURCE_ID.fullmatch(external_id) or workspace:
            raise InvalidArgument("a Standard Webhooks identity is the source id (src_…), no workspace")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify the signature list with the injected clock (±300 s)."""
        standard_webhooks.verify(body, headers, secrets, clock)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """``webhook-id`` / ``svix-id``."""
        return standard_webhooks.message_id(headers)

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified JSON message.

        Raises:
            MalformedPayload: the body is not a JSON object.
        """
        payload = load_json_object(body)
        kind = one_line(text(payload.get("type"), 100) or "message", 100)
        sender = Sender("standard_webhooks", "", SOURCE_SENDER)
        return Envelope("webhook", kind, payload, sender, title=one_line(f"Webhook {kind}"))


ADAPTER = StandardWebhooksSource()
