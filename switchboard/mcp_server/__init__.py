"""The agent surface: the tool catalogue, the MCP server (HTTP) and the channel adapter (stdio).

Rule: imports the domain packages (``queue``, ``inbox``, ``friends``, ``feed``, ``notify``,
``intake``, ``admin``); imported only by ``web`` (``/mcp``) and ``cli`` (``channel``). A new tool
is a :class:`~switchboard.mcp_server.specs.ToolSpec` added to ``TOOLS`` in :mod:`.tools` (or
``RELAY_TOOLS`` in :mod:`.relay_tools`); :mod:`.specs` is below both, :mod:`.calls` above.
"""