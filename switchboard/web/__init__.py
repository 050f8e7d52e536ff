"""HTTP: the uvicorn root (async receiver, agent stream, /mcp, Flask mount) and the Flask app.

Rule: the top: imports everything below (hub, domain packages, ``mcp_server``); imported
only by ``cli`` (``serve``) and lazily by the hub (the ingest writer and source cache). ASGI
routes are registered in :mod:`.asgi`, Flask blueprints in :mod:`.flask_app`. REST modules are
named by caller: ``rest_agent_*`` (agent tokens), ``rest_human_*`` (human tokens), ``rest_ops``.
"""