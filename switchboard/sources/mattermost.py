"""Mattermost outgoing webhooks.

- Verification: the ``token`` field of the body (form or JSON), compared in constant time with
  the webhook's token (:mod:`switchboard.verifiers.shared_token`). The token is dropped from
  the parsed payload.
- Dedup key: ``post_id``.
- Sender: workspace = ``team_id``, id = ``user_id`` (ids are per server, 26 characters).
- Work: every message that triggered the webhook; the text is content.

Source: https://developers.mattermost.com/integrate/webhooks/outgoing/
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument, MalformedPayload
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import is_form, join_title, load_form, load_json_object, text
from switchboard.verifiers import SignatureMissing, shared_token

_ID = re.compile(r"[a-z0-9]{26}")


def _load(body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
    if is_form(headers):
        return dict(load_form(body))
    return load_json_object(body)


class MattermostSource(BaseSource):
    """The Mattermost outgoing-webhook adapter (see module docstring)."""

    provider = "mattermost"
    generates_secret = False
    secret_help = "a Mattermost outgoing-webhook token"

    def validate_secret(self, secret: str) -> None:
        """The token Mattermost shows for the webhook: 26 lower-case letters and digits.

        Raises:
            InvalidArgument: otherwise.
        """
        if not _ID.fullmatch(secret):
            raise InvalidArgument("a Mattermost outgoing-webhook token is 26 lower-case letters and digits "
                                  "(Integrations → Outgoing Webhooks → Token)")

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """Workspace = team id, id = user id (26 lower-case letters and digits each).

        Raises:
            InvalidArgument: otherwise.
        """
        if not _ID.fullmatch(workspace):
            raise InvalidArgument("Mattermost identities need --workspace: the team id (26 characters)")
        if not _ID.fullmatch(external_id):
            raise InvalidArgument("a Mattermost external id is the user id (26 characters), not the username")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Compare the body's ``token`` with the configured tokens.

        Raises:
            SignatureMissing: the body does not parse or carries no string token.
            SignatureMismatch: the token matches none.
        """
        try:
            token = _load(body, headers).get("token")
        except MalformedPayload:
            raise SignatureMissing() from None
        if not isinstance(token, str):
            raise SignatureMissing()
        shared_token.verify(token, secrets)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """``post_id``, or ``None``."""
        try:
            return text(_load(body, headers).get("post_id"), 100)
        except MalformedPayload:
            return None

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified request (the token is removed).

        Raises:
            MalformedPayload: unparseable body.
        """
        payload = _load(body, headers)
        payload.pop("token", None)
        user = text(payload.get("user_id"))
        team = text(payload.get("team_id")) or ""
        sender = Sender("mattermost", team, user, text(payload.get("user_name"))) if user else None
        where = text(payload.get("channel_name"), 80) or "a channel"
        title = join_title(f"Mattermost message from {text(payload.get('user_name')) or user or 'someone'} "
                           f"in {where}", payload.get("text"))
        return Envelope("message", None, payload, sender, title=title)


ADAPTER = MattermostSource()
