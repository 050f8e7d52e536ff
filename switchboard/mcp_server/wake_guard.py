"""The channel adapter's own check of every wake before Claude Code sees it (issue 13 item 9).

The hub already renders wakes safely (``notify/wakes.py``) and rejected channel breaks at
intake; the adapter applies the same rules again, so a hub bug or a compromised hub cannot
become a prompt injection through ``<channel>`` (defence in depth, DESIGN.md §5, §6.5):

- ``content`` is made one visible line (bidi controls and invisible characters dropped, the
  hub's :func:`~switchboard.notify.wakes.visible_text`) and cut to :data:`MAX_CONTENT_CHARS`;
  if it could then open or close a ``<channel>`` tag by the intake rule
  (:func:`~switchboard.intake.channel_break.breaks_channel`), the whole wake is refused, never
  rewritten;
- ``meta`` keeps only snake_case identifier keys (``[a-z][a-z0-9_]*``, at most 40, never
  ``source``, which Claude Code sets on the tag itself), at most :data:`MAX_META_KEYS` of them,
  with string values in the hub's charset ``[A-Za-z0-9_.:/#@+=-]`` (others become ``_``), at
  most 100 characters.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from switchboard.intake.channel_break import breaks_channel
from switchboard.notify.wakes import visible_text

log = logging.getLogger(__name__)
MAX_CONTENT_CHARS = 1000
MAX_META_KEYS = 10
_KEY = re.compile(r"[a-z][a-z0-9_]{0,39}")
_VALUE = re.compile(r"[^A-Za-z0-9_.:/#@+=-]")
RESERVED_KEYS = frozenset({"source"})


class WakeRefused(ValueError):
    """The wake breaks the channel rule and is not forwarded."""


def screen(event: Any) -> tuple[str, dict[str, str]]:
    """The ``(content, meta)`` to forward for a hub event ``{content, meta}``.

    Raises:
        WakeRefused: not an object with string content, empty content, or content that could
            break out of the ``<channel>`` tag.
    """
    if not isinstance(event, dict) or not isinstance(event.get("content"), str):
        raise WakeRefused("a wake without text content")
    content = visible_text(event["content"])[:MAX_CONTENT_CHARS]
    if not content:
        raise WakeRefused("a wake with empty content")
    if breaks_channel(content):
        raise WakeRefused("a wake whose content could break the channel tag")
    raw_meta = event.get("meta")
    meta: dict[str, str] = {}
    if isinstance(raw_meta, dict):
        for key, value in raw_meta.items():
            if len(meta) >= MAX_META_KEYS:
                break
            if not isinstance(key, str) or not _KEY.fullmatch(key) or key in RESERVED_KEYS:
                continue
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                continue
            meta[key] = _VALUE.sub("_", str(value))[:100]
    return content, meta
