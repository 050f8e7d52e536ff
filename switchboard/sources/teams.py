"""Microsoft Teams outgoing webhooks (a channel's @mention of the webhook).

- Verification: ``Authorization: HMAC <base64>`` = HMAC-SHA256 of the raw body keyed with the
  base64-decoded security token (:mod:`switchboard.verifiers.teams_hmac`).
- Ack: Teams waits at most 5 s and shows the reply in the channel, so an accepted message is
  answered 200 with a message activity body.
- Dedup key: the activity ``id``.
- Sender: ``from.aadObjectId`` (the Entra ID object id, stable; ``from.id`` is per bot), no
  workspace.
- Work: every message; the text (without the ``<at>`` mention markup) is content.

Source: https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/add-outgoing-webhook
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import get, join_title, load_json_object, one_line, text
from switchboard.verifiers import teams_hmac

_MENTION = re.compile(r"<at>[^<]{0,200}</at>")
_TAG = re.compile(r"<[^>]{0,200}>")
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class TeamsSource(BaseSource):
    """The Teams outgoing-webhook adapter (see module docstring)."""

    provider = "teams"
    admits_in_writer = False  # its reply body is sent with the ack
    generates_secret = False
    secret_help = "a Teams security token"

    def validate_secret(self, secret: str) -> None:
        """The security token Teams shows once: strict base64 of 32 bytes.

        Raises:
            InvalidArgument: otherwise.
        """
        try:
            key = teams_hmac.decode_token(secret)
        except ValueError:
            raise InvalidArgument("a Teams security token is base64 (shown once when the outgoing "
                                  "webhook is created)") from None
        if len(key) != 32:
            raise InvalidArgument("a Teams security token decodes to 32 bytes")

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """The user's Entra ID object id (a GUID), no workspace.

        Raises:
            InvalidArgument: otherwise.
        """
        if not _GUID.fullmatch(external_id):
            raise InvalidArgument("a Teams external id is the user's Entra ID object id (aadObjectId, a GUID)")
        if workspace:
            raise InvalidArgument("Teams identities have no workspace (object ids are unique)")

    def normalize_identity(self, workspace: str, external_id: str) -> tuple[str, str]:
        """Object ids are compared in lower case."""
        return workspace, external_id.lower()

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify ``Authorization: HMAC`` (Teams sends no timestamp)."""
        teams_hmac.verify(body, headers, secrets)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """The activity ``id``, or ``None``."""
        try:
            return text(load_json_object(body).get("id"), 200)
        except Exception:  # noqa: BLE001 - parse() reports an unparseable body
            return None

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified activity.

        Raises:
            MalformedPayload: the body is not a JSON object.
        """
        payload = load_json_object(body)
        kind = text(payload.get("type"), 60) or "unknown"
        aad = text(get(payload, "from", "aadObjectId"))
        name = text(get(payload, "from", "name"))
        sender = Sender("teams", "", aad.lower(), name) if aad else None
        title = None
        if kind == "message":
            said = html.unescape(_TAG.sub("", _MENTION.sub("", str(payload.get("text") or ""))))
            title = join_title(f"Teams message from {name or 'someone'}", said)
        summary = None if title else one_line(f"Teams {kind} activity")
        return Envelope("activity", kind, payload, sender, title=title, summary=summary)

    def accept_reply(self, envelope: Envelope, delivery_id: str) -> dict[str, Any] | None:
        """A message activity, which Teams shows in the thread."""
        return {"type": "message", "text": f"Received; queued for agents ({delivery_id})."}


ADAPTER = TeamsSource()
