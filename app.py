"""The ASGI root: ``uvicorn app:app`` (settings from ``SWITCHBOARD_*``; see README)."""

from switchboard.web.asgi import create_app

app = create_app(settle=True)
