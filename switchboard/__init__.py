"""Switchboard: verified webhooks in, durable todos and channel wakes out (DESIGN.md)."""

from __future__ import annotations

__version__ = "0.1.0"
