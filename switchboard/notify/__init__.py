"""Wakes and the broker that carries them to attached sessions (DESIGN.md §2, §6.5).

Rule: imports ``models``, ``feed``, ``db``, ``scope`` and ``inbox.items`` (the trailer's
attention cursor); imported by ``queue``, ``inbox``, ``friends``, ``mcp_server``, ``web`` and the
hub, which builds the broker (:class:`switchboard.hub.Hub`).
"""