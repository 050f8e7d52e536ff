"""Logging set-up: text or JSON lines on stderr, with the request id of the request being served.

``SWITCHBOARD_LOG_FORMAT=json`` gives one JSON object per line (python-json-logger), with
``time``, ``level``, ``logger``, ``message`` and ``request_id`` when the line was written while
serving a request. :class:`RequestIdMiddleware` takes the caller's ``X-Request-ID`` when it is
a sane token (a proxy's id keeps one id across hops), else makes one, and returns it on the
response; the id lives in a context variable, which ``anyio`` worker threads and the Flask
mount (``a2wsgi`` copies the context) inherit. Log lines never carry bodies, signatures or
tokens (DESIGN.md §5): the receiver logs a source id and an error code, nothing else.
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets
import sys
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("switchboard_request_id", default=None)
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def configure(level: str, fmt: str = "text") -> None:
    """Send logs to stderr as text or JSON lines (idempotent; replaces root handlers).

    Args:
        level: ``DEBUG`` … ``CRITICAL``.
        fmt: ``text`` or ``json`` (``SWITCHBOARD_LOG_FORMAT``).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            datefmt="%Y-%m-%dT%H:%M:%S%z"))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def request_id_for(headers: Iterable[tuple[bytes, bytes]] = ()) -> str:
    """The id of a request with these raw (ASGI: lower-case names) headers: its ``X-Request-ID``
    when that is a sane token (1-64 of ``A-Z a-z 0-9 . _ : -``), else a new ``req_`` and 16
    hex digits (64 random bits)."""
    # A plain loop, and the regex only for a header that is there: the generator and the match
    # of an empty string were half of the request id middleware's 5 µs a request (issue 11).
    for name, value in headers:
        if name == b"x-request-id":
            given = value.decode("latin-1")
            if _SANE_ID.fullmatch(given):
                return given
            break
    return "req_" + secrets.token_hex(8)


SCOPE_KEY = "switchboard.request_id"
"""Where a request's id is kept in its ASGI scope (:func:`request_id_of`)."""


def request_id_of(scope: Any) -> str:
    """The id of the request of this ASGI ``scope``, chosen once (:func:`request_id_for`) and kept
    in the scope: the app's :class:`RequestIdMiddleware` and the server protocol's own answers
    (a 408 for a body that did not arrive; :mod:`switchboard.web.server_protocol`) give the
    same one, the one its log lines carry."""
    rid = scope.get(SCOPE_KEY)
    if rid is None:
        rid = scope[SCOPE_KEY] = request_id_for(scope.get("headers", ()))
    return str(rid)


class RequestIdMiddleware:
    """ASGI middleware: one request id per HTTP request, in the context and ``X-Request-ID``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_of(scope)
        token = request_id.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[Any] = [h for h in message.get("headers", []) if h[0].lower() != b"x-request-id"]
                headers.append((b"x-request-id", rid.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)
