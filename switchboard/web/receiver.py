"""``POST /hooks/<source_id>``: the webhook receiver (DESIGN.md §6.1), a native async route.

Order: find the source (404), enforce the size limit while reading the raw bytes once (413),
answer a provider's unsigned health check that is exactly that (Slack ``ssl_check``: 200,
empty, nothing stored), refuse when the source has no secret (503), verify the signature on
those bytes (401 for every failure, whatever the header's shape), parse (400
``malformed_payload``, recorded on a stored delivery), answer a handshake (200 with the
provider's JSON, nothing stored), dedup on the key or the body digest (200 ``duplicate``),
store, commit, then 202 (or 200 with the body a provider needs with its ack, e.g. Discord,
Teams) and hand off to processing.
Nothing acknowledged is lost: the row is committed before the 2xx.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from sqlalchemy import select, union_all
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from switchboard import directory, metrics
from switchboard.errors import (
    MalformedPayload,
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    SourceUnconfigured,
    SwitchboardError,
    VerificationFailed,
)
from switchboard.models import Delivery, Source
from switchboard.sources import Envelope, adapter_for
from switchboard.web.problems import from_error, problem

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)
_SOURCE_ID = re.compile(r"src_[a-z2-7]{10,60}")
_REDACT = ("signature", "authorization", "token", "secret", "cookie", "api-key", "apikey")
# Headers that verification, dedup or routing read: sent twice, two parsers (a proxy and us)
# could pick different ones, so a repeat is refused rather than guessed: 401 for a credential
# (every authentication failure is 401, issue 12 #1), 400 for the others.
_CREDENTIAL = re.compile(r"signature|token|authorization|timestamp")
_SINGLE = re.compile(r"signature|token|authorization|timestamp|delivery|hook-id|event|webhook-id|svix-id|"
                     r"idempotency|content-type|content-length")


def redacted_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers safe to store and show: credential-like values replaced by ``[redacted]``."""
    return {k: ("[redacted]" if any(word in k for word in _REDACT) else v[:1000]) for k, v in headers.items()}


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def receive(request: Request) -> Response:
    """Handle one delivery; see the module docstring for the order of checks."""
    hub: Hub = request.app.state.hub
    source_id = request.path_params.get("source_id", "")
    try:
        return await _receive(hub, request, source_id)
    except SwitchboardError as exc:
        metrics.delivery_refused(hub, source_id, exc.status, exc.code)
        if exc.status == 401:
            log.info("delivery refused for %s: %s", source_id[:40], exc.code)
            hub.counters["deliveries_unverified"] += 1
        elif exc.status == 413:
            hub.counters["deliveries_too_large"] += 1
        return from_error(exc)
    except ClientDisconnect:
        return Response(status_code=400)


async def _receive(hub: Hub, request: Request, source_id: str) -> Response:
    if not _SOURCE_ID.fullmatch(source_id):
        raise NotFound("no such source")
    with hub.db.read() as s:
        source = s.get(Source, source_id)
        if source is None or not source.enabled:
            raise NotFound("no such source")
        secrets = directory.source_secrets(s, source.id, hub.clock.now())
    declared = request.headers.get("content-length")
    if declared is not None and not declared.strip().isdigit():
        return problem(400, "malformed_request", "Content-Length is not a number")
    body = await _read_body(request, hub.settings.max_body_bytes)
    adapter = adapter_for(source.provider)
    if adapter.health_check(body, {k.lower(): v for k, v in request.headers.items()}):
        hub.counters["health_checks"] += 1
        return Response(status_code=200)
    if not secrets:
        raise SourceUnconfigured()
    headers: dict[str, str] = {}
    for raw_name, value in request.headers.items():
        name = raw_name.lower()
        if name in headers and _SINGLE.search(name):
            if _CREDENTIAL.search(name):
                raise VerificationFailed("the delivery could not be verified")
            raise MalformedRequest(f"header {name} is sent more than once")
        headers[name] = value
    try:
        verify_source = getattr(adapter, "verify_source", None)
        if verify_source is not None:  # a scheme with per-source options (GitHub's legacy SHA-1)
            verify_source(source, body, headers, secrets, hub.clock)
        else:
            adapter.verify(body, headers, secrets, hub.clock)
    except (VerificationFailed, MalformedRequest):
        # One generic 401 for every verification failure, whatever the header's shape: no oracle
        # for attackers, and Discord's endpoint checker requires 401 (issue 12 #1).
        raise VerificationFailed("the delivery could not be verified") from None

    dedup_key = adapter.dedup_key(headers, body)
    body_digest = adapter.body_digest(headers, body)
    parse_error: MalformedPayload | None = None
    envelope: Envelope | None = None
    try:
        envelope = adapter.parse(body, headers)
    except MalformedPayload as exc:
        parse_error = exc
    if envelope is not None and envelope.handshake is not None:
        # Slack url_verification, Discord PING: answered after verifying, nothing to process.
        hub.counters["handshakes"] += 1
        return JSONResponse(envelope.handshake, status_code=200)

    delivery = Delivery(
        source_id=source.id, project_id=source.project_id, dedup_key=dedup_key, body_digest=body_digest,
        content_type=headers.get("content-type", "")[:200] or None, headers=redacted_headers(headers),
        raw_body=None if parse_error else body, body_bytes=len(body), received_at=hub.clock.now(),
        event=envelope.kind[:100] if envelope is not None else None,
    )
    if parse_error is not None:
        delivery.status, delivery.error_code, delivery.error_detail = "failed", parse_error.code, parse_error.message
    duplicate_of = _store(hub, delivery)
    if duplicate_of is not None:
        metrics.delivery_accepted(source, duplicate=True)
        return JSONResponse({"delivery_id": duplicate_of, "duplicate": True}, status_code=200)
    if parse_error is not None:
        metrics.delivery_outcome(source.provider, "malformed")
        return from_error(parse_error)
    hub.dispatcher.submit(delivery.id)
    metrics.delivery_accepted(source)
    reply = adapter.accept_reply(envelope, delivery.id) if envelope is not None else None
    if reply is not None:
        # Discord and Teams show the ack's body to the user and want 200 within 3-5 s.
        return JSONResponse(reply, status_code=200)
    return JSONResponse({"delivery_id": delivery.id, "status": "received"}, status_code=202)


def _first_id(session: Session, delivery: Delivery) -> str | None:
    """The id of the delivery already stored under this one's dedup key or body digest, if any.

    The digest makes a captured body re-sent with fresh unsigned headers (a new
    ``X-GitHub-Delivery``, another ``X-GitHub-Event``) a duplicate (issue 12 #7). One round
    trip of two index seeks (``UNION ALL``, each on its unique constraint), rather than an
    ``OR`` a planner may answer with a scan.
    """
    lookups = [select(Delivery.id).where(Delivery.source_id == delivery.source_id, column == value)
               for column, value in ((Delivery.dedup_key, delivery.dedup_key),
                                     (Delivery.body_digest, delivery.body_digest)) if value is not None]
    if not lookups:
        return None
    query = lookups[0] if len(lookups) == 1 else union_all(*lookups)
    return session.execute(query.limit(1)).scalars().first()


def _store(hub: Hub, delivery: Delivery) -> str | None:
    """Insert the delivery; return the first delivery's id when the dedup key was seen.

    The dedup lookup and the insert share one write transaction (one round of the single
    writer on SQLite instead of a read session and a write session).
    """
    try:
        with hub.db.write() as s:
            first = _first_id(s, delivery)
            if first is None:
                s.add(delivery)
        return first
    except IntegrityError:
        # A concurrent request with the same key won the insert (PostgreSQL, several servers).
        with hub.db.read() as s:
            first = _first_id(s, delivery)
        if first is None:
            raise
        return first


async def wrong_method(request: Request) -> Response:
    """405 problem for anything but POST on a hook URL."""
    return problem(405, "method_not_allowed", "webhook URLs accept POST only", headers={"Allow": "POST"})
