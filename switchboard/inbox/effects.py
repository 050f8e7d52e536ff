"""What deciding an inbox item of a given kind does besides the item itself.

A registry, kept free of imports so that installing into it costs nothing: the kinds whose
decision reaches up (a ``permission`` verdict to the relaying session, a ``friend`` approval
becoming a friendship) live above :mod:`switchboard.inbox.items`, which only reads this table.
The composition root installs them (:func:`switchboard.hub.install_inbox_effects`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Effect = Callable[[Any, Any, Any], None]
"""``(session, clock, item)``: runs in the resolving transaction."""

ON_DECIDED: dict[str, Effect] = {}
"""Kind to effect run when an item is decided, before its feed event (the permission verdict)."""
AFTER_RESOLVED: dict[str, Effect] = {}
"""Kind to effect run after an item is resolved and flushed, whatever the outcome (friend)."""
KINDS_WITH_EFFECTS = ("permission", "friend")
"""Kinds that must have an effect installed before one of their items is resolved."""


def register(kind: str, *, on_decided: Effect | None = None, after_resolved: Effect | None = None) -> None:
    """Install what resolving an item of ``kind`` also does.

    Args:
        kind: An inbox item kind (``permission``, ``friend``).
        on_decided: Runs when the item is decided, before its feed event.
        after_resolved: Runs after the item is resolved and flushed.
    """
    if on_decided is not None:
        ON_DECIDED[kind] = on_decided
    if after_resolved is not None:
        AFTER_RESOLVED[kind] = after_resolved


def installed(kind: str) -> bool:
    """Whether ``kind`` needs no effect, or has one installed."""
    return kind not in KINDS_WITH_EFFECTS or kind in ON_DECIDED or kind in AFTER_RESOLVED
