"""Screening text that agents or Claude Code hand the hub (DESIGN.md §5, §6.5, §6.6).

Permission prompts relayed from Claude Code (``tool_name``, ``description``,
``input_preview``) and todos that agents create for each other are as untrusted as a webhook
payload: they reach a human's inbox, notifications and other agents' contexts. They go
through the same two rules as deliveries, in the same order:

1. the channel-break rule (:mod:`switchboard.intake.channel_break`) on every field, and on the
   fields as they will be joined for display; a break refuses the input (never rewritten);
2. secrets to refs (:mod:`switchboard.intake.secrets`): every value found is replaced by its
   rendered ref everywhere.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from switchboard.errors import InvalidArgument
from switchboard.intake import secrets as secret_rules
from switchboard.intake.channel_break import check_text, find_break
from switchboard.text import readable


@dataclass(frozen=True)
class ScreenedTexts:
    """Sanitised fields (name → text or ``None``) and the refs minted for the values found."""

    texts: dict[str, str | None]
    refs: list[secret_rules.MintedRef] = field(default_factory=list)


def screen_texts(texts: Mapping[str, str | None], *, joined: str | None = None) -> ScreenedTexts:
    """Apply the channel-break rule and secrets-to-refs to named text fields.

    Args:
        texts: field name → text (``None`` skipped).
        joined: a rendering that joins the fields (a wake line, a notification), checked too so
            a tag split across two fields is caught.

    Returns:
        :class:`ScreenedTexts`, each value replaced by ``[secret ref=sec_… type=…]``.

    Raises:
        InvalidArgument: a field (or the joined rendering) could open or close a ``<channel>``
            tag; the message names the field, never the text.
    """
    # Nothing a reader cannot see (bidi overrides, zero widths, terminal escapes): what the
    # human approves is what the agent will run (switchboard.text).
    present = {k: readable(v, multiline=True) for k, v in texts.items() if v is not None}
    found = find_break(present)
    if found is not None:
        raise InvalidArgument(f"{found.path.removeprefix('$.') or 'text'} must not contain a <channel> tag")
    if joined is not None and check_text(joined) is not None:
        raise InvalidArgument("the fields joined together must not contain a <channel> tag")
    found = secret_rules.find(present)
    for text in present.values():
        # Claude Code's input_preview is the tool input as JSON text: the key-name rules
        # (``api_key``, ``password``...) apply to its fields as to a webhook payload's.
        parsed = _json_container(text)
        if parsed is not None:
            found += [dataclasses.replace(f, path=None) for f in secret_rules.find(parsed) if f.path is not None]
    redaction = secret_rules.redact(present, found)
    out: dict[str, str | None] = {k: None for k in texts}
    out.update(redaction.payload)
    return ScreenedTexts(out, redaction.refs)


def _json_container(text: str) -> Any:
    """``text`` parsed when it is a JSON object or array (else ``None``)."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None
