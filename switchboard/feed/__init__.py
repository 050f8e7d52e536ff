"""Feed events: the append-only record of what happened (DESIGN.md §6.7).

Rule: imports ``models``, ``scope``, ``clock`` and ``notify.cursors`` (pages keep the agent's
feed cursor); imported by every writer of events and by ``mcp_server``/``web``. A new event
kind is added to :data:`switchboard.feed.events.KINDS`.
"""