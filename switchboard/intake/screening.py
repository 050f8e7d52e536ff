"""Screening a parsed delivery: the channel-break rule everywhere, then secrets to refs (DESIGN.md §5).

:func:`screen` is what processing calls between parsing and attribution. In order:

1. The channel-break rule (:mod:`switchboard.intake.channel_break`) on every decoded string and
   key of the payload, on every form field name and value (and JSON nested in a form field
   such as GitHub's ``payload=``), and on the raw body (as UTF-8).
2. Secrets (:mod:`switchboard.intake.secrets`): every value found is replaced by a rendered
   ref everywhere in the payload; when anything was replaced, the title and summary are
   rendered again from the sanitised payload, so they carry refs, never values.
3. The rule again on what will be shown: the kind, the title, the summary and the wake
   content as joined (``switchboard: todo td_… on <queue>: <title>``), so a tag split across
   two fields that a title joins is caught.

The result is either a :class:`~switchboard.intake.channel_break.Break` (reject the delivery)
or the sanitised :class:`~switchboard.sources.Envelope` with the secrets to store in the vault.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qsl

from switchboard.intake import secrets as secret_rules
from switchboard.intake.channel_break import Break, check_text, find_break
from switchboard.sources import Envelope, SourceAdapter

_FORM = "application/x-www-form-urlencoded"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_WAKE_PLACEHOLDER_ID = "td_0000000000000000"  # our own charset: it cannot complete a tag


@dataclass(frozen=True)
class Screened:
    """The outcome of :func:`screen`.

    Attributes:
        rejected: the first channel break found, or ``None``.
        envelope: the sanitised envelope (payload, title and summary carry refs, never secret
            values); ``None`` when rejected.
        secrets: the refs minted for the values found, to be stored in the vault.
    """

    rejected: Break | None
    envelope: Envelope | None = None
    secrets: list[secret_rules.MintedRef] = field(default_factory=list)


def warm_up() -> None:
    """Build the Unicode tables and compile the scanner rules now (about 1 s), not on the first delivery."""
    check_text("<")
    secret_rules.warm_up()


def find_body_break(raw_body: bytes, headers: Mapping[str, str], payload: object) -> Break | None:
    """The channel-break rule on the raw body, form fields and every decoded string and key.

    Args:
        raw_body: the delivery's exact bytes (decoded as UTF-8 with replacement for the check).
        headers: the delivery's headers, lower-case names (``content-type`` selects form parsing).
        payload: the parsed payload (JSON value).

    Returns:
        The first :class:`Break` (path ``raw_body``, ``form.<name>``, ``form.<name>$…`` or ``$…``),
        else ``None``.
    """
    # The decoded payload first, for the most precise path; the raw body last, for what parsing
    # hides (a duplicate JSON key keeps only its last value).
    found = find_break(payload)
    if found is not None:
        return found
    text = raw_body.decode("utf-8", errors="replace")
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type == _FORM:
        for i, (name, value) in enumerate(parse_qsl(text, keep_blank_values=True)):
            where = f"form.{name}" if _PLAIN_NAME.fullmatch(name) else f"form.{{field#{i}}}"
            for part in (name, value):
                rule = check_text(part)
                if rule is not None:
                    return Break(where, rule)
            if value[:1] in ("{", "["):
                try:
                    nested = json.loads(value)
                except ValueError:
                    continue
                found = find_break(nested, f"{where}$")
                if found is not None:
                    return found
    rule = check_text(text)
    return Break("raw_body", rule) if rule is not None else None


def find_rendered_break(texts: Mapping[str, str | None]) -> Break | None:
    """The channel-break rule on rendered text (titles, summaries, wake content), as joined.

    Args:
        texts: name → rendered text (``None`` entries are skipped); the name becomes the path.
    """
    for name, text in texts.items():
        if text is None:
            continue
        rule = check_text(text)
        if rule is not None:
            return Break(name, rule)
    return None


def wake_content(queue: str, title: str) -> str:
    """The wake line as :class:`~switchboard.notify.wakes.Wake` renders it, for checking before the todo exists."""
    return f"switchboard: todo {_WAKE_PLACEHOLDER_ID} on {queue}: {title}"


def screen(raw_body: bytes, headers: Mapping[str, str], envelope: Envelope, adapter: SourceAdapter,
           queue: str) -> Screened:
    """Run the whole intake check on one parsed delivery (see the module docstring).

    Args:
        raw_body: the exact bytes received.
        headers: the stored headers (lower-case names).
        envelope: what ``adapter.parse`` made of them.
        adapter: the source's adapter, used to render the title again from the sanitised payload.
        queue: the queue a todo would go to (part of the wake content).

    Returns:
        :class:`Screened`: rejected, or the sanitised envelope and the refs to store.
    """
    found = find_body_break(raw_body, headers, envelope.payload)
    if found is not None:
        return Screened(found)
    redaction = secret_rules.redact(envelope.payload)
    if redaction.refs:
        rebuilt = adapter.parse(json.dumps(redaction.payload).encode(),
                                {**headers, "content-type": "application/json"})
        envelope = replace(envelope, payload=redaction.payload, title=rebuilt.title, summary=rebuilt.summary)
        envelope = replace(envelope, title=secret_rules.scrub(envelope.title, redaction.refs),
                           summary=secret_rules.scrub(envelope.summary, redaction.refs))
    rendered = {"kind": envelope.kind, "title": envelope.title, "summary": envelope.summary,
                "wake": wake_content(queue, envelope.title) if envelope.title is not None else None}
    found = find_rendered_break(rendered)
    if found is not None:
        return Screened(found)
    return Screened(None, envelope, redaction.refs)
