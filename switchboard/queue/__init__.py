"""Durable todos, processing jobs and the dispatcher (DESIGN.md §2, §6.2)."""
