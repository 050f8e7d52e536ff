"""Baselines for ``bench/ingest.py``: a bare Flask endpoint and a bare async route, both 202.

Served by uvicorn like the hub: ``uvicorn bench.bare_apps:flask_app`` (Flask through a2wsgi,
as the hub mounts its Flask app) and ``uvicorn bench.bare_apps:async_app`` (Starlette).
"""

from __future__ import annotations

from a2wsgi import WSGIMiddleware
from flask import Flask, request
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

_flask = Flask("bare")


@_flask.post("/hooks/<source_id>")
def _flask_hook(source_id: str) -> tuple[dict[str, str], int]:
    request.get_data()
    return {"status": "received"}, 202


flask_app = WSGIMiddleware(_flask)


async def _async_hook(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse({"status": "received"}, status_code=202)


async_app = Starlette(routes=[Route("/hooks/{source_id}", _async_hook, methods=["POST"])])
