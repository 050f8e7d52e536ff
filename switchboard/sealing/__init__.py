"""Sealing at rest: the vault key ring, AES-256-GCM records and the sealed column types (DESIGN.md §5).

Rule: imports only ``errors`` (and ``config`` for type hints); imported by ``models`` (the
column types), ``config`` (key ring syntax), ``intake.vault`` (store, rotate, fetch) and the
web login cookie key. A new sealed format is a module here with its own associated-data label.
"""
