"""Feed events: the append-only record of what happened (DESIGN.md §6.7)."""
