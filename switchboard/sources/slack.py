"""Slack: Events API (JSON), slash commands and interactivity (form bodies).

- Verification: signing secret ``v0`` over ``v0:<timestamp>:<raw body>``, ±300 s
  (:mod:`switchboard.verifiers.slack_signature`); form bodies are verified as received.
- Handshake: ``url_verification`` is answered ``{"challenge": ...}`` only after verifying.
- Health check: Slack POSTs ``ssl_check=1&token=...`` (form, unsigned) to check the
  certificate; exactly that body is answered 200 with an empty body before verification and
  nothing is stored. Any other field sends the request through normal verification.
- Dedup key: a human message is one piece of work: ``msg:<team>:<channel>:<ts>`` for
  ``message`` and ``app_mention`` events (an @-mention arrives as both, with different
  ``event_id`` s: the second is a duplicate); ``api_app_id:event_id`` for other Events API
  callbacks; ``trigger:<trigger_id>`` for slash commands and interactions. A retry
  (``X-Slack-Retry-Num``) carries the same event, so it is answered as a duplicate
  (webhook-faults.md #5); a retry whose first attempt never reached us is the first copy we
  have and is accepted, so nothing is lost.
- Sender: workspace = the user's team (``user_team``/``team``, else ``team_id``), id = the
  user id, read where the event nests it: ``event.message`` for ``message_changed`` and
  ``message_replied``, ``event.previous_message`` for ``message_deleted``, ``event.user.id``
  when ``user`` is an object (``user_change``, ``team_join``). Bot when the (nested) message
  carries ``bot_id``/``bot_profile`` or subtype ``bot_message``.
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
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import (
    get,
    is_form,
    join_title,
    label,
    load_form,
    load_json_object,
    one_line,
    text,
)
from switchboard.verifiers import slack_signature

_SECRET = re.compile(r"[0-9a-f]{32}")
_TEAM = re.compile(r"[TE][A-Z0-9]{2,30}")
_USER = re.compile(r"[UW][A-Z0-9]{2,30}")
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
WORK_EVENTS = ("app_mention", "message")
WORK_SUBTYPES = (None, "thread_broadcast", "file_share")
_NESTED = {"message_changed": "message", "message_replied": "message", "message_deleted": "previous_message"}


def message_key(payload: Mapping[str, Any]) -> str | None:
    """``msg:<team>:<channel>:<ts>`` for a human message event (``message``/``app_mention``), else
    ``None``. The same message delivered as both events has one key (issue 12 #3)."""
    if payload.get("type") != "event_callback":
        return None
    event = payload.get("event")
    if not isinstance(event, dict) or event.get("type") not in WORK_EVENTS:
        return None
    if text(event.get("subtype"), 60) not in WORK_SUBTYPES:
        return None
    team, channel, ts = text(payload.get("team_id")), text(event.get("channel")), text(event.get("ts"))
    if not (team and channel and ts):
        return None
    return f"msg:{team}:{channel}:{ts}"[:300]


def _event_sender(payload: Mapping[str, Any], event: Mapping[str, Any], subtype: str | None) -> Sender | None:
    """The author of an Events API event, read where the event nests it (see module docstring)."""
    nested = event.get(_NESTED[subtype]) if subtype in _NESTED else None
    msg: Mapping[str, Any] = nested if isinstance(nested, dict) else event
    raw_user = msg.get("user")
    user = text(get(raw_user, "id")) if isinstance(raw_user, dict) else text(raw_user)
    team = (text(msg.get("user_team")) or text(msg.get("team")) or text(get(raw_user, "team_id"))
            or text(event.get("user_team")) or text(payload.get("team_id")) or "")
    bot_id = text(msg.get("bot_id")) or text(event.get("bot_id"))
    is_bot = (bool(bot_id) or isinstance(msg.get("bot_profile"), dict) or subtype == "bot_message"
              or msg.get("subtype") == "bot_message" or get(raw_user, "is_bot") is True)
    if user:
        return Sender("slack", team, user, is_bot=is_bot)
    if is_bot:
        return Sender("slack", team, bot_id or "bot", is_bot=True)
    return None


class SlackSource(BaseSource):
    """The Slack adapter (see module docstring)."""

    provider = "slack"
    admits_in_writer = False  # its url_verification handshake and slash-command replies come from the payload
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

    replay_window = True

    def health_check(self, body: bytes, headers: Mapping[str, str]) -> bool:
        """True for exactly ``ssl_check=1&token=<value>`` (either order), nothing more.

        Source: https://api.slack.com/interactivity/slash-commands ("ssl_check" requests).
        """
        if len(body) > 1000 or not body.startswith((b"ssl_check=", b"token=")):
            return False
        try:
            fields = load_form(body)
        except MalformedPayload:
            return False
        return set(fields) == {"ssl_check", "token"} and fields["ssl_check"] == "1"

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify ``X-Slack-Signature`` with the injected clock (±300 s)."""
        slack_signature.verify(body, headers, secrets, clock)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """``msg:<team>:<channel>:<ts>`` for a human message, else ``api_app_id:event_id``, else
        ``trigger:<trigger_id>``, else ``None``."""
        try:
            payload, _ = _load(body, headers)
        except MalformedPayload:
            return None
        message = message_key(payload)
        if message is not None:
            return message
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
        sender = _event_sender(payload, event, subtype)
        user = sender.external_id if sender is not None and not sender.is_bot else None
        title = None
        if etype in WORK_EVENTS and subtype in WORK_SUBTYPES:
            where = text(event.get("channel"), 40) or "a channel"
            noun = "Slack mention" if etype == "app_mention" else "Slack message"
            said = _MENTION.sub(r"@\1", str(event.get("text") or ""))
            title = join_title(f"{noun} from {user or 'someone'} in {where}", said)
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
    command = label(fields.get("command"), 60) or "/command"
    title = join_title(f"Slack {command} from {user or 'someone'}", fields.get("text"))
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
        chosen = (label(get(first, "selected_option", "text", "text")) or label(get(first, "text", "text"))
                  or label(first.get("value")) or label(first.get("action_id")))
        noun = "button pressed" if first.get("type") in (None, "button") else "choice made"
        title = join_title(f"Slack {noun} by {user or 'someone'}", chosen)
    elif kind in ("view_submission", "shortcut", "message_action"):
        name = label(get(payload, "view", "callback_id")) or label(payload.get("callback_id"))
        noun = "form submitted" if kind == "view_submission" else "shortcut used"
        title = join_title(f"Slack {noun} by {user or 'someone'}", name)
    summary = None if title else one_line(f"Slack interaction {kind}")
    return Envelope("interaction", kind, payload, sender, title=title, summary=summary)


ADAPTER = SlackSource()
