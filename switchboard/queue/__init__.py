"""Durable todos, processing jobs and the dispatcher (DESIGN.md §2, §6.2).

Rule: imports ``models``, ``feed``, ``notify``, ``intake``, ``inbox``, ``sources``, ``scope``;
never the hub (the hub composes the dispatcher with :mod:`.jobs`). Imported by the hub,
``worker``, ``mcp_server``, ``web``, ``cli``, ``friends``, ``replay``.
"""