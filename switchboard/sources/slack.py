"""Slack: Events API (JSON), slash commands and interactivity (form bodies).

- Verification: signing secret ``v0`` over ``v0:<timestamp>:<raw body>``, ±300 s
  (:mod:`switchboard.verifiers.slack_signature`); form bodies are verified as received.
- Handshake: ``url_verification`` is answered ``{"challenge": ...}`` only after verifying.
- Dedup key: ``api_app_id:event_id`` for Events API callbacks; ``trigger:<trigger_id>`` for
  slash commands and interactions. A retry (``X-Slack-Retry-Num``) carries the same
  ``event_id``, so it is answered as a duplicate (webhook-faults.md #5); a retry whose first
  attempt never reached us is the first copy we have and is accepted, so nothing is lost.
- Sender: workspace = the user's team (``event.user_team``, else ``team_id``), id = the user
  id; bot when the event carries ``bot_id`` (or subtype ``bot_message``).
- Work: mentions and messages, slash commands and button presses/submissions. The message
  text is content for the agent, never an instruction to the hub.
- The deprecated verification ``token`` field is dropped from the payload.

Sources: https://api.slack.com/authentication/verifying-requests-from-slack ,
https://api.slack.com/apis/events-api , https://api.slack.com/interactivity/slash-commands ,
https://api.slack.com/reference/interaction-payloads
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument, MalformedPayload
from switchboard.sources import BaseSource, Envelope, Sender
from switchboard.sources.bodies import get, is_form, load_form, load_json_object, one_line, text
from switchboard.verifiers import slack_signature

_SECRET = re.compile(r"[0-9a-f]{32}")
_TEAM = re.compile(r"[TE][A-Z0-9]{2,30}")
_USER = re.compile(r"[UW][A-Z0-9]{2,30}")
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
WORK_EVENTS = ("app_mention", "message")


class SlackSource(BaseSource):
    """The Slack adapter (see module docstring)."""

    provider = "slack"
    generates_secret = False
    secret_help = "a Slack signing secret"

    def validate_secret(self, secret: str) -> None:
        """A signing secret: 32 lower-case hex digits (App settings → Basic Information).

        Raises:
            InvalidArgument: anything else (e.g. a bot token or the deprecated verification token).
        """
        if not _SECRET.fullmatch(secret):
            raise InvalidArgument("a Slack signing secret is 32 lower-case hex digits "
                                  "(Basic Information → App Credentials → Signing Secret)")

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """Workspace = team id (``T…``/``E…``), id = user id (``U…``/``W…``).

        Raises:
            InvalidArgument: otherwise.
        """
        if not _TEAM.fullmatch(workspace):
            raise InvalidArgument("Slack identities need --workspace: the team id (T…)")
        if not _USER.fullmatch(external_id):
            raise InvalidArgument("a Slack external id is the user id (U… or W…), not the display name")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock) -> None:
        """Verify ``X-Slack-Signature`` with the injected clock (±300 s)."""
        slack_signature.verify(body, headers, secrets, clock)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """``api_app_id:event_id``, or ``trigger:<trigger_id>``, or ``None``."""
        try:
            payload, _ = _load(body, headers)
        except MalformedPayload:
            return None
        event_id = text(payload.get("event_id"))
        if event_id:
            return f"{text(payload.get('api_app_id')) or ''}:{event_id}"[:300]
        trigger = text(payload.get("trigger_id"))
        return f"trigger:{trigger}"[:300] if trigger else None

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified request into an :class:`Envelope`.

        Raises:
            MalformedPayload: unparseable body, a form that is neither a command nor an
                interaction, or a ``url_verification`` without a string challenge.
        """
        payload, shape = _load(body, headers)
        payload.pop("token", None)
        if shape == "command":
            return _command(payload)
        if shape == "interaction":
            return _interaction(payload)
        kind = text(payload.get("type"), 60) or "unknown"
        if kind == "url_verification":
            challenge = payload.get("challenge")
            if not isinstance(challenge, str) or not challenge or len(challenge) > 500:
                raise MalformedPayload("url_verification needs a string challenge")
            return Envelope("url_verification", None, payload, handshake={"challenge": challenge})
        if kind != "event_callback":
            return Envelope(kind, None, payload, summary=one_line(f"Slack {kind}"))
        event = payload.get("event") if isinstance(payload.get("event"), dict) else {}
        etype = text(event.get("type"), 60) or "unknown"
        subtype = text(event.get("subtype"), 60)
        team = text(event.get("user_team")) or text(payload.get("team_id")) or ""
        user = text(event.get("user"))
        is_bot = bool(event.get("bot_id")) or subtype == "bot_message"
        sender = Sender("slack", team, user, is_bot=is_bot) if user else None
        if sender is None and is_bot:
            sender = Sender("slack", team, text(event.get("bot_id")) or "bot", is_bot=True)
        title = None
        if etype in WORK_EVENTS and subtype in (None, "thread_broadcast", "file_share"):
            where = text(event.get("channel"), 40) or "a channel"
            noun = "Slack mention" if etype == "app_mention" else "Slack message"
            said = _MENTION.sub(r"@\1", str(event.get("text") or ""))
            title = one_line(f"{noun} from {user or 'someone'} in {where}: {said}")
        summary = None if title else one_line(f"Slack {etype}{'.' + subtype if subtype else ''}")
        return Envelope("event_callback", etype, payload, sender, title=title, summary=summary)

    def accept_reply(self, envelope: Envelope, delivery_id: str) -> dict[str, Any] | None:
        """Slash commands get an ephemeral acknowledgement (200); events get the plain 202."""
        if envelope.event == "slash_command":
            return {"response_type": "ephemeral", "text": f"Received; queued for agents ({delivery_id})."}
        return None


def _load(body: bytes, headers: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    """``(payload, shape)`` with shape ``command``, ``interaction`` or ``event``."""
    if is_form(headers):
        fields = load_form(body)
        if "payload" in fields:
            return load_json_object(fields["payload"]), "interaction"
        if "command" in fields:
            return dict(fields), "command"
        raise MalformedPayload("form body is neither a slash command nor an interaction payload")
    return load_json_object(body), "event"


def _command(fields: dict[str, Any]) -> Envelope:
    user = text(fields.get("user_id"))
    team = text(fields.get("team_id")) or ""
    sender = Sender("slack", team, user, text(fields.get("user_name"))) if user else None
    command = one_line(fields.get("command") or "/command", 60)
    title = one_line(f"Slack {command} from {user or 'someone'}: {fields.get('text') or ''}")
    return Envelope("slash_command", None, fields, sender, title=title)


def _interaction(payload: dict[str, Any]) -> Envelope:
    payload.pop("token", None)
    kind = text(payload.get("type"), 60) or "unknown"
    user = text(get(payload, "user", "id"))
    team = text(get(payload, "user", "team_id")) or text(get(payload, "team", "id")) or ""
    sender = Sender("slack", team, user, text(get(payload, "user", "username"))) if user else None
    title = None
    if kind == "block_actions":
        actions = payload.get("actions") if isinstance(payload.get("actions"), list) else []
        first = actions[0] if actions and isinstance(actions[0], dict) else {}
        label = get(first, "text", "text") or first.get("value") or first.get("action_id") or ""
        title = one_line(f"Slack button pressed by {user or 'someone'}: {label}")
    elif kind in ("view_submission", "shortcut", "message_action"):
        name = get(payload, "view", "callback_id") or payload.get("callback_id") or ""
        noun = "form submitted" if kind == "view_submission" else "shortcut used"
        title = one_line(f"Slack {noun} by {user or 'someone'}: {name}")
    summary = None if title else one_line(f"Slack interaction {kind}")
    return Envelope("interaction", kind, payload, sender, title=title, summary=summary)


ADAPTER = SlackSource()
