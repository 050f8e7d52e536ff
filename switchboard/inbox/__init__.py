"""Questions, approvals (and later permission prompts): items that wait on a human.

Rule: imports ``models``, ``feed``, ``scope``, ``notify.sessions``/``cursors`` and ``intake``'s pure checks;
never ``friends`` or the hub: a kind whose decision reaches up registers an effect
(:mod:`switchboard.inbox.effects`, installed by :class:`switchboard.hub.Hub`).
Imported by ``mcp_server``, ``web``, ``cli``, ``friends``, ``queue.jobs`` (chat verdicts).
"""