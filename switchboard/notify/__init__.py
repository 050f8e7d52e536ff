"""Wakes and the broker that carries them to attached sessions (DESIGN.md §2, §6.5)."""
