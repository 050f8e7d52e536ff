"""Discord interactions (the application's Interactions Endpoint URL).

- Verification: Ed25519 over ``X-Signature-Timestamp`` + raw body with the application's
  public key (64 hex digits), :mod:`switchboard.verifiers.discord_signature`. A bad signature
  is 401: Discord probes the endpoint with one (webhook-faults.md #7).
- Handshake: PING (``type`` 1) is answered ``{"type": 1}`` only after verifying.
- Ack: Discord needs an interaction response within 3 s, so accepted work is answered 200
  with an ephemeral message (``type`` 4, flag 64); autocomplete gets empty choices (``type`` 8).
- Dedup key: the interaction ``id``.
- Sender: ``member.user.id`` (in a guild) or ``user.id`` (in a DM), no workspace (Discord user
  ids are global); bot when ``user.bot``.
- The interaction ``token`` (a short-lived credential) is dropped from the parsed payload.

Source: https://discord.com/developers/docs/interactions/receiving-and-responding
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import get, join_title, label, load_json_object, one_line, text
from switchboard.text import ascii_digits
from switchboard.verifiers import discord_signature

PING, COMMAND, COMPONENT, AUTOCOMPLETE, MODAL = 1, 2, 3, 4, 5
_NAMES = {PING: "ping", COMMAND: "application_command", COMPONENT: "message_component",
          AUTOCOMPLETE: "autocomplete", MODAL: "modal_submit"}
EPHEMERAL = 64


class DiscordSource(BaseSource):
    """The Discord interactions adapter (see module docstring)."""

    provider = "discord"
    admits_in_writer = False  # its PING handshake and interaction replies come from the payload
    generates_secret = False
    secret_help = "a Discord application public key"

    def validate_secret(self, secret: str) -> None:
        """The application's public key: 64 hex digits that decode to a valid Ed25519 key.

        Raises:
            InvalidArgument: otherwise (e.g. the bot token or client secret pasted by mistake).
        """
        try:
            discord_signature.load_public_key(secret)
        except ValueError:
            raise InvalidArgument("a Discord public key is 64 hex digits (Developer Portal → General "
                                  "Information → Public Key)") from None

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """A Discord user id (a numeric snowflake), no workspace.

        Raises:
            InvalidArgument: otherwise.
        """
        if not ascii_digits(external_id) or len(external_id) > 20:
            raise InvalidArgument("a Discord external id is the numeric user id (snowflake)")
        if workspace:
            raise InvalidArgument("Discord identities have no workspace (user ids are global)")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify the Ed25519 signature with the configured public keys."""
        discord_signature.verify(body, headers, secrets)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """The interaction ``id``, or ``None``."""
        try:
            return text(load_json_object(body).get("id"), 100)
        except Exception:  # noqa: BLE001 - a body that does not parse has no key; parse() reports it
            return None

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified interaction.

        Raises:
            MalformedPayload: the body is not a JSON object.
        """
        payload = load_json_object(body)
        itype = payload.get("type")
        if itype == PING and not isinstance(itype, bool):
            return Envelope("ping", None, payload, handshake={"type": 1})
        # The interaction token lets its holder post as the app for 15 minutes: it stays in the
        # stored raw body (for replies) and never reaches an agent.
        payload.pop("token", None)
        name = _NAMES.get(itype, "unknown") if isinstance(itype, int) and not isinstance(itype, bool) else "unknown"
        user = get(payload, "member", "user") if isinstance(get(payload, "member", "user"), dict) else payload.get("user")
        uid = text(get(user, "id"))
        sender = Sender("discord", "", uid, text(get(user, "username")), is_bot=get(user, "bot") is True) if uid else None
        data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
        who = text(get(user, "username")) or uid or "someone"
        title = None
        if itype == COMMAND:
            command, args = _command_line(data)
            title = join_title(f"Discord /{command} from {who}", args)
        elif itype == COMPONENT:
            # component_type 2 is a button; 3 and 5-8 are select menus (values chosen).
            values = data.get("values") if isinstance(data.get("values"), list) else []
            chosen = ", ".join(v for v in (label(x) for x in values[:10]) if v)
            noun = "button pressed" if data.get("component_type") in (None, 2) else "choice made"
            title = join_title(f"Discord {noun} by {who}", chosen or data.get("custom_id"))
        elif itype == MODAL:
            title = join_title(f"Discord form submitted by {who}", data.get("custom_id"))
        summary = None if title else one_line(f"Discord {name} interaction")
        return Envelope("interaction", name, payload, sender, title=title, summary=summary)

    def accept_reply(self, envelope: Envelope, delivery_id: str) -> dict[str, Any] | None:
        """An interaction response: ephemeral message, or empty autocomplete choices."""
        if envelope.action == "autocomplete":
            return {"type": 8, "data": {"choices": []}}
        return {"type": 4, "data": {"content": f"Received; queued for agents ({delivery_id}).",
                                    "flags": EPHEMERAL}}


def _command_line(data: dict[str, Any]) -> tuple[str, str]:
    """``(name, args)`` of a slash command: sub-command groups and sub-commands (option types 1
    and 2) join the name; the other options are ``name=value`` pairs, empty ones left out."""
    names = [label(data.get("name"), 60) or "command"]
    options = data.get("options") if isinstance(data.get("options"), list) else []
    for _ in range(2):
        sub = options[0] if len(options) == 1 and isinstance(options[0], dict) else None
        if sub is None or sub.get("type") not in (1, 2):
            break
        names.append(label(sub.get("name"), 60) or "?")
        options = sub.get("options") if isinstance(sub.get("options"), list) else []
    pairs = []
    for option in options[:10]:
        name, value = label(get(option, "name"), 40), label(get(option, "value"))
        if name and value:
            pairs.append(f"{name}={value}")
    return " ".join(names), " ".join(pairs)


ADAPTER = DiscordSource()
