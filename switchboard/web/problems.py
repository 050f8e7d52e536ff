"""RFC 9457 problem details, rendered in one place for the ASGI routes.

Body: ``{type, title, status, detail, code}`` as ``application/problem+json``
(https://www.rfc-editor.org/rfc/rfc9457).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from starlette.responses import JSONResponse

from switchboard.errors import SwitchboardError

PROBLEM_TYPE = "urn:switchboard:problem:"
MEDIA_TYPE = "application/problem+json"


def problem_body(status: int, code: str, detail: str) -> dict[str, Any]:
    """The problem-details object for ``status`` and our error ``code``."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    return {"type": PROBLEM_TYPE + code, "title": title, "status": status, "detail": detail, "code": code}


def problem(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A problem-details response."""
    return JSONResponse(problem_body(status, code, detail), status_code=status, media_type=MEDIA_TYPE,
                        headers=headers)


def from_error(exc: SwitchboardError) -> JSONResponse:
    """Render a :class:`SwitchboardError` as problem details."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 and exc.code == "unauthenticated" else None
    return problem(exc.status, exc.code, exc.message, headers)
