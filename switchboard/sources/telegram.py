"""Telegram bots (``setWebhook`` with ``secret_token``).

- Verification: ``X-Telegram-Bot-Api-Secret-Token`` equals the ``secret_token`` given to
  ``setWebhook``, compared in constant time (:mod:`switchboard.verifiers.shared_token`).
- Dedup key: ``update_id`` (per bot, and a source is one bot).
- Sender: ``from.id`` of the message / edited message / callback query / business message
  (``user.id`` of a reaction or poll answer), no workspace; bot when ``is_bot`` (an anonymous
  group admin posts as ``GroupAnonymousBot``, a bot). Channel posts have no person behind them
  (only ``sender_chat``) and are quarantined.
- Work: text messages and button presses (callback queries); the text is content.

Source: https://core.telegram.org/bots/api#setwebhook and https://core.telegram.org/bots/api#update
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import get, join_title, load_json_object, one_line, text
from switchboard.text import ascii_digits
from switchboard.verifiers import shared_token

_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
_KINDS = ("message", "edited_message", "channel_post", "edited_channel_post", "callback_query",
          "inline_query", "chosen_inline_result", "my_chat_member", "chat_member", "chat_join_request",
          "business_message", "edited_business_message", "message_reaction", "poll_answer",
          "shipping_query", "pre_checkout_query")
# Where an update kind names its actor: ``from`` for most, ``user`` for reactions and poll
# answers (https://core.telegram.org/bots/api#messagereactionupdated, #pollanswer).
_ACTOR = {"message_reaction": "user", "poll_answer": "user"}


class TelegramSource(BaseSource):
    """The Telegram adapter (see module docstring)."""

    provider = "telegram"
    secret_help = "a Telegram webhook secret_token"

    def validate_secret(self, secret: str) -> None:
        """1-256 characters of ``A-Z a-z 0-9 _ -`` (Telegram's own rule).

        Raises:
            InvalidArgument: otherwise.
        """
        if not _SECRET.fullmatch(secret):
            raise InvalidArgument("a Telegram secret_token is 1-256 characters of A-Z, a-z, 0-9, '_' and '-'")

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """The numeric user id (``from.id``), no workspace.

        Raises:
            InvalidArgument: otherwise.
        """
        if not ascii_digits(external_id):
            raise InvalidArgument("a Telegram external id is the numeric user id (from.id), not the username")
        if workspace:
            raise InvalidArgument("Telegram identities have no workspace")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Compare ``X-Telegram-Bot-Api-Secret-Token`` with the configured secrets."""
        shared_token.verify(headers.get("x-telegram-bot-api-secret-token"), secrets)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """``update_id``, or ``None``."""
        try:
            return text(load_json_object(body).get("update_id"), 40)
        except Exception:  # noqa: BLE001 - parse() reports an unparseable body
            return None

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified update.

        Raises:
            MalformedPayload: the body is not a JSON object.
        """
        payload = load_json_object(body)
        kind = next((k for k in _KINDS if isinstance(payload.get(k), dict)), "unknown")
        item: dict[str, Any] = payload.get(kind) if isinstance(payload.get(kind), dict) else {}
        actor = _ACTOR.get(kind, "from")
        uid = text(get(item, actor, "id"))
        who = text(get(item, actor, "username")) or text(get(item, actor, "first_name")) or uid or "someone"
        sender = Sender("telegram", "", uid, text(get(item, actor, "username")),
                        is_bot=get(item, actor, "is_bot") is True) if uid else None
        title = None
        if kind in ("message", "edited_message", "business_message") and isinstance(item.get("text"), str):
            title = join_title(f"Telegram message from {who}", item["text"])
        elif kind == "callback_query":
            title = join_title(f"Telegram button pressed by {who}", item.get("data"))
        summary = None if title else one_line(f"Telegram {kind} update")
        return Envelope("update", kind, payload, sender, title=title, summary=summary)


ADAPTER = TelegramSource()
