"""A logging filter that keeps payloads and credentials out of every log (issue 13 item 6).

Third-party libraries log what passes through them at DEBUG: sse-starlette every chunk it
sends (so a ``secret_fetch`` result over ``/mcp`` landed in ``serve.log``), the MCP SDK the
messages it handles, httpx/httpcore request and response details. :class:`Redactor`, installed on
every handler of the root logger by :func:`install`:

1. drops records below WARNING from :data:`PAYLOAD_LOGGERS` (what they log there is payload);
2. masks, in every record it lets through (ours included, every level): agent and human tokens
   (``sbk_…``, ``sbh_…``), ``Bearer`` credentials and Standard Webhooks secrets (``whsec_…``).
   Source ids are left alone: ``serve`` prints each webhook URL at start for the operator.

Records are rewritten in place (``msg`` becomes the masked message, ``args`` empty), so every
handler and formatter after it sees the masked text. ``serve`` hands uvicorn ``log_config=None``
so its loggers reach these handlers too.
"""

from __future__ import annotations

import logging
import re

PAYLOAD_LOGGERS = ("sse_starlette", "mcp", "httpx", "httpx2", "httpcore", "hpack", "a2wsgi", "starlette",
                   "websockets", "urllib3", "redis", "rq.job")
_MASKS = (
    (re.compile(r"\b(sbk|sbh)_[A-Za-z0-9_-]{8,}"), r"\1_***"),
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",}]+"), r"\1 ***"),
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=_-]{8,}"), "whsec_***"),
)


def mask(text: str) -> str:
    """``text`` with tokens, bearer credentials and webhook secrets masked."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _is_payload_logger(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in PAYLOAD_LOGGERS)


class Redactor(logging.Filter):
    """Drop payload-bearing third-party records below WARNING; mask credentials in the rest."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and _is_payload_logger(record.name):
            return False
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is still logged, as its template
            message = str(record.msg)
        masked = mask(message)
        if masked != message or record.args:
            record.msg, record.args = masked, None
        if record.exc_text:
            record.exc_text = mask(record.exc_text)
        return True


def install(logger: logging.Logger | None = None) -> Redactor:
    """Add one :class:`Redactor` to every handler of ``logger`` (default: root); idempotent."""
    target = logger or logging.getLogger()
    redactor = next((f for h in target.handlers for f in h.filters if isinstance(f, Redactor)), None) or Redactor()
    for handler in target.handlers:
        if redactor not in handler.filters:
            handler.addFilter(redactor)
    return redactor
