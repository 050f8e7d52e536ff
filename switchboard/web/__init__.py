"""HTTP: the uvicorn root (async receiver, agent stream, /mcp, Flask mount) and the Flask app."""
