"""Intake: attribution, quarantine, the channel-break check, secrets (DESIGN.md §5)."""
