"""``POST /hooks/<source_id>``: the webhook receiver (DESIGN.md §6.1), a plain ASGI app.

Order: find the source (404) and bound the body (413; both in
:class:`~switchboard.web.guard.RequestGuard`, before the body is read), read the raw bytes once,
answer a provider's unsigned health check that is exactly that (Slack ``ssl_check``: 200,
empty, nothing stored), refuse when the source has no secret (503), verify the signature on
those bytes (401 for every failure, whatever the header's shape), parse (400
``malformed_payload``, recorded on a stored delivery), answer a handshake (200 with the
provider's JSON, nothing stored), dedup on the key or the body digest (200 ``duplicate``),
store, commit, then 202 (or 200 with the body a provider needs with its ack, e.g. Discord,
Teams) and hand off to processing.
Nothing acknowledged is lost: the row is committed before the 2xx.

The event loop never touches the database (issue 11): the source and its secrets come from
:class:`~switchboard.web.ingest.SourceCache` (read in a worker thread on a miss), and the row
is stored by :class:`~switchboard.web.ingest.DeliveryWriter`, which groups the waiting
deliveries into one transaction and answers each request's future after the commit.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import TYPE_CHECKING

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from switchboard import metrics
from switchboard.errors import (
    DependencyUnavailable,
    MalformedPayload,
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    SourceUnconfigured,
    SwitchboardError,
    VerificationFailed,
)
from switchboard.models.base import new_ordered_id
from switchboard.sources import Envelope
from switchboard.web.ingest import (
    MALFORMED,
    NO_SUCH_SOURCE,
    REFUSED,
    STALE,
    CachedSource,
    failed_row,
    known_source,
    read_stamp,
)
from switchboard.web.problems import from_error, problem

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)
_REDACT = ("signature", "authorization", "token", "secret", "cookie", "api-key", "apikey")
_REDACTED_NAME = re.compile("|".join(map(re.escape, _REDACT)))
"""Any of :data:`_REDACT` in a (lower-case) header name: one search instead of seven ``in``
tests in a generator per header (5 % of the receiver's time, issue 11)."""
# Headers that verification, dedup or routing read: sent twice, two parsers (a proxy and us)
# could pick different ones, so a repeat is refused rather than guessed: 401 for a credential
# (every authentication failure is 401, issue 12 #1), 400 for the others.
_CREDENTIAL = re.compile(r"signature|token|authorization|timestamp")
_SINGLE = re.compile(r"signature|token|authorization|timestamp|delivery|hook-id|event|webhook-id|svix-id|"
                     r"idempotency|content-type|content-length")
_ACCEPTED = '{{"delivery_id":"{}","status":"received"}}'
"""The 202's body, as ``JSONResponse`` renders ``{"delivery_id": id, "status": "received"}``."""


@functools.lru_cache(maxsize=1024)
def _credential_name(name: str) -> bool:
    """Whether a (lower-case) header name holds any of :data:`_REDACT`. Cached: a provider sends
    the same few names every time, and the search was half of the redaction's cost (issue 11);
    bounded, so made-up names cannot grow it."""
    return _REDACTED_NAME.search(name) is not None


def redacted_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers safe to store and show: credential-like values replaced by ``[redacted]``."""
    return {k: ("[redacted]" if _credential_name(k) else v[:1000]) for k, v in headers.items()}


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The request body (bytes). :class:`~switchboard.web.guard.RequestGuard` has refused a
    ``Content-Length`` or a body over ``limit`` (413) and replays what it read; the cap here
    only keeps that promise if the receiver is ever mounted without it.

    Raises:
        PayloadTooLarge: the bytes read exceed ``limit``.
        ClientDisconnect: the client went before the whole body arrived.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)  # one chunk (the guard's replay): the same object, no copy


class HookReceiver:
    """The receiver as a plain ASGI app (no ``Request`` object), the source id in
    ``scope["path_params"]["source_id"]``. :class:`~switchboard.web.asgi.HookShortcut` calls it
    straight after :class:`~switchboard.web.guard.RequestGuard`, skipping Starlette's router and
    exception layers (about a seventh of a delivery's time on the event loop, issue 11); the
    router's ``/hooks/{source_id}`` routes name it too.
    """

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hub = self.hub
        source_id = scope.get("path_params", {}).get("source_id", "")
        try:
            response = await _receive(hub, scope, receive, source_id)
        except SwitchboardError as exc:
            response = refused(hub, source_id, exc)
        except ClientDisconnect:
            response = Response(status_code=400)
        await response(scope, receive, send)


# One function per outcome: the seams where counters (and /metrics) hook in.

def refused(hub: Hub, source_id: str, exc: SwitchboardError) -> Response:
    """A 4xx/503 answer: unknown source, too large, unverified, malformed, database down."""
    metrics.delivery_refused(hub, source_id, exc.status, exc.code)
    if exc.status == 401:
        log.info("delivery refused for %s: %s", source_id[:40], exc.code)
        hub.counters["deliveries_unverified"] += 1
    elif exc.status == 413:
        hub.counters["deliveries_too_large"] += 1
    return from_error(exc)


def answered_handshake(hub: Hub, envelope: Envelope) -> Response:
    """A verified handshake (Slack url_verification, Discord PING): answered, nothing stored."""
    hub.counters["handshakes"] += 1
    return JSONResponse(envelope.handshake, status_code=200)


def duplicate(hub: Hub, entry: CachedSource, first_id: str) -> Response:
    """A delivery whose dedup key or body digest was seen: 200 with the first delivery's id."""
    hub.counters["deliveries_duplicate"] += 1
    metrics.delivery_outcome(entry.source.provider, "duplicate")
    return JSONResponse({"delivery_id": first_id, "duplicate": True}, status_code=200)


class _Accepted:
    """The 202 of a stored delivery as a plain ASGI answer, the same two messages and headers
    Starlette's ``Response(body, 202, media_type="application/json")`` sends
    (``content-length``, then ``content-type: application/json``): making that object (its
    header list, its render) was about 3.5 µs of the event loop's time per delivery (issue 11)."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 202,
                    "headers": [(b"content-length", b"%d" % len(self.body)), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": self.body})


def accepted(hub: Hub, entry: CachedSource, envelope: Envelope | None, delivery_id: str) -> Response | _Accepted:
    """A stored (committed) delivery: 202, or 200 with the body the provider needs."""
    hub.counters["deliveries_received"] += 1
    metrics.delivery_outcome(entry.source.provider, "accepted")
    reply = entry.adapter.accept_reply(envelope, delivery_id) if envelope is not None else None
    if reply is not None:
        # Discord and Teams show the ack's body to the user and want 200 within 3-5 s.
        return JSONResponse(reply, status_code=200)
    # Rendered from a template, not json.dumps (about 7 µs of the event loop's time per delivery,
    # issue 11): the same bytes, since a delivery id is ``dlv_`` and ``[a-z2-7]`` (new_ordered_id).
    return _Accepted(_ACCEPTED.format(delivery_id).encode())


async def _source(hub: Hub, source_id: str, fresh: bool = False) -> CachedSource:
    """The cached source (read in a worker thread on a miss, never on the loop). Raises NotFound."""
    entry = await known_source(hub, source_id, fresh)
    if entry is None:
        raise NotFound(NO_SUCH_SOURCE)
    return entry


def _verify(hub: Hub, entry: CachedSource, body: bytes, headers: dict[str, str]) -> None:
    if not entry.secrets:
        raise SourceUnconfigured()
    try:
        entry.adapter.verify(body, headers, list(entry.secrets), hub.clock, entry.options)
    except (VerificationFailed, MalformedRequest):
        # One generic 401 for every verification failure, whatever the header's shape: no oracle
        # for attackers, and Discord's endpoint checker requires 401 (issue 12 #1).
        raise VerificationFailed("the delivery could not be verified") from None


async def _receive(hub: Hub, scope: Scope, receive: Receive, source_id: str) -> Response | _Accepted:
    # Looked up again now that the body is in, not taken from the guard's look-up before it: a
    # secret that expired while the body arrived must not verify it (a review: a 202 where
    # d2f116f answered 401), and a source disabled meanwhile is a 404 first.
    entry = await _source(hub, source_id)
    # As Starlette's Headers read them: latin-1, names lower-cased.
    pairs = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in scope["headers"]]
    body = await _read_body(receive, hub.settings.max_body_bytes)
    if entry.adapter.health_check(body, dict(pairs)):
        hub.counters["health_checks"] += 1
        return Response(status_code=200)
    headers: dict[str, str] = {}
    for name, value in pairs:
        if name in headers and _SINGLE.search(name):
            if _CREDENTIAL.search(name):
                raise VerificationFailed("the delivery could not be verified")
            raise MalformedRequest(f"header {name} is sent more than once")
        headers[name] = value
    try:
        _verify(hub, entry, body, headers)
    except (VerificationFailed, SourceUnconfigured):
        # The cache may predate a rotation: refuse only against freshly read secrets.
        entry = await _source(hub, source_id, fresh=True)
        _verify(hub, entry, body, headers)

    dedup_key = entry.adapter.dedup_key(headers, body)
    body_digest: str | None = None
    parse_error: MalformedPayload | None = None
    envelope: Envelope | None = None
    # Admitted on the headers as stored (redacted, each value cut to 1,000 characters), the
    # ones processing parses again: a value padded past the cut (b"\xa0" * 1000 + id, which
    # str.strip() would have emptied only after it) was acked 202 here and refused there.
    stored_headers = redacted_headers(headers)
    # Most adapters' answer never depends on the payload: the delivery writer admits the body
    # and takes its digest, off the event loop (ingest.admit_row; issue 11). The others (a
    # handshake, a reply body) are admitted here.
    admit = entry.source.provider if entry.adapter.admits_in_writer else None
    if admit is None:
        body_digest = entry.adapter.body_digest(headers, body)
        try:
            envelope = entry.adapter.admit(body, stored_headers)  # no title or sender: processing builds them
        except MalformedPayload as exc:
            parse_error = exc
    if envelope is not None and envelope.handshake is not None:
        if not await anyio.to_thread.run_sync(_still_current, hub, entry):
            entry = await _source(hub, source_id, fresh=True)
            _verify(hub, entry, body, headers)
        return answered_handshake(hub, envelope)

    now = hub.clock.now()
    row = {
        "id": new_ordered_id("dlv", now), "source_id": entry.source.id, "project_id": entry.source.project_id,
        "dedup_key": dedup_key, "body_digest": body_digest, "status": "received", "event": envelope.kind[:100] if envelope is not None else None,
        "content_type": headers.get("content-type", "")[:200] or None, "headers": stored_headers,
        "raw_body": body, "body_bytes": len(body), "human_id": None, "quarantine_reason": None,
        "error_code": None, "error_detail": None, "todo_id": None, "process_failures": 0,
        "received_at": now, "processed_at": None, "released_at": None, "released_by": None,
    }
    if parse_error is not None:
        row = failed_row(row, parse_error)  # answered (MALFORMED, its detail) by the writer
    for _ in range(3):
        outcome, delivery_id = await hub.delivery_writer.store(row, entry.stamp, dispatch=parse_error is None,
                                                               admit=admit)
        if outcome != STALE:
            break
        # The source or its secrets changed after we verified: verify again against fresh rows.
        entry = await _source(hub, source_id, fresh=True)
        _verify(hub, entry, body, headers)
        row["project_id"] = entry.source.project_id
    else:
        raise DependencyUnavailable("the source keeps changing; retry the delivery")
    assert delivery_id is not None  # or, for these two outcomes, the adapter's message
    if outcome == REFUSED:
        raise MalformedRequest(delivery_id)
    if outcome == MALFORMED:
        metrics.delivery_outcome(entry.source.provider, "malformed")
        return from_error(MalformedPayload(delivery_id))
    if outcome == "duplicate":
        return duplicate(hub, entry, delivery_id)
    return accepted(hub, entry, envelope, delivery_id)


def _still_current(hub: Hub, entry: CachedSource) -> bool:
    with hub.db.read() as s:
        return read_stamp(s.connection()) == entry.stamp


async def wrong_method(request: Request) -> Response:
    """405 problem for anything but POST on a hook URL."""
    return problem(405, "method_not_allowed", "webhook URLs accept POST only", headers={"Allow": "POST"})
