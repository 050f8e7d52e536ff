"""uvicorn settings against slow clients (issue 13 item 8).

uvicorn bounds the idle time between requests on a kept-alive connection (``timeout_keep_alive``)
but nothing else: a connection that never sends a byte, or sends half its headers, stays open
forever. :class:`HeaderTimeoutProtocol` (uvicorn's h11 protocol) closes a connection that has
not sent complete request headers within ``header_timeout_seconds`` of connecting or of its
previous response, and answers 408 (problem details) when a request's body does not arrive
within ``body_timeout_seconds`` of its headers. Body sizes are bounded by
:mod:`switchboard.web.guard` (413).

A response sent before the request has all arrived (413 over the size limit, 401 before the body
is read, 400 or 431 for a request the HTTP parser refused) is followed by a *lingering close*,
as nginx does (``lingering_close``): the server sends its response and a FIN, then reads and
discards what the client still sends, for at most :data:`LINGER_SECONDS` and until
:data:`LINGER_IDLE_SECONDS` pass without a byte. Closed at once instead, the socket answered the
client's next bytes with a reset, and a client still sending (any that does not use
``Expect: 100-continue``) saw "connection reset", never the 413 (a new-user run: a 26 MiB
delivery) or the 431.

Behind a reverse proxy, set the proxy's own header and body timeouts too (nginx:
``client_header_timeout 10s; client_body_timeout 30s; keepalive_timeout 5s``; Caddy:
``timeouts { read_header 10s read_body 30s idle 5s }``), so slow clients are shed before they
reach the hub (README, "Deployment").
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from switchboard.config import Settings
from switchboard.logs import request_id, request_id_for, request_id_of
from switchboard.web.problems import MEDIA_TYPE, problem_body

log = logging.getLogger(__name__)

KEEP_ALIVE_SECONDS = 5
LINGER_SECONDS = 30.0
"""A lingering close lasts at most this long (nginx's ``lingering_time`` default)."""
LINGER_IDLE_SECONDS = 5.0
"""A lingering close ends when the client sends nothing for this long (``lingering_timeout``)."""


CORK_BYTES = 65536
"""Writes held for one pass of the event loop are sent at once past this many bytes (asyncio's
default high-water mark), so a large body still meets the transport's flow control."""


_MAY_STILL_SEND = (h11.SEND_BODY, h11.ERROR)
"""The client's h11 states in which a close lingers: its body was still arriving, or h11 refused
its request (the rest of a 70 KB header, of a bad chunked body, is still on the way)."""


class _LingeringTransport:
    """The connection's transport as uvicorn's protocol and request cycles see it: ``close()``
    lingers (see the module docstring) while the client may still be sending (its body, or
    the rest of a request h11 refused); what is written in one pass of the event loop goes to
    the socket in one ``send`` at the end of the pass; every other attribute is the
    transport's own.

    uvicorn's h11 protocol writes a response's head and its body separately, two ``send``
    system calls per response; together with the writes of the delivery writer's pipe they were
    a fifth of ``serve``'s CPU samples at full ingest (issue 11, py-spy). Held for the pass
    (``loop.call_soon``), a response leaves in one when the pass that wrote it ends: a
    streamed response's head too, unless its handler blocks the loop before its next await
    (the stream handlers here run blocking work in threads).
    """

    def __init__(self, transport: asyncio.Transport, protocol: HeaderTimeoutProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False
        self._held: bytearray | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._held is None:
            self._held = bytearray(data)
            self._protocol.loop.call_soon(self.flush)
        else:
            self._held += data
        if len(self._held) >= CORK_BYTES:
            self.flush()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what this pass wrote (before a close, an EOF, or at the end of the pass)."""
        held, self._held = self._held, None
        if held:
            self._transport.write(held)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self.flush()  # into the transport's buffer, which abort() discards as before
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + (len(self._held) if self._held else 0)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.flush()
        protocol = self._protocol
        # Still sending: a body, or a request h11 refused (a 400 or 431 sent before its end).
        if (protocol.conn.their_state in _MAY_STILL_SEND and not protocol.shutting_down
                and not self._transport.is_closing() and self._transport.can_write_eof()):
            protocol._linger()
        else:  # nothing more to come, a server shutting down, or a connection already gone
            self._transport.close()

    def abort_linger(self) -> None:
        """Close now, lingering or not (what was written still leaves first)."""
        self._closing = True
        self.flush()
        self._transport.close()


class HeaderTimeoutProtocol(H11Protocol):
    """h11 protocol that closes connections slow to send request headers, and answers 408 to a
    request whose body does not arrive within ``body_timeout`` of its headers.

    One deadline per connection: set for the headers when the connection opens and after each
    response, moved to the body's when a request's headers arrive with a body to come, and
    cleared once the body is complete (cheaper than a cancel scope around every body read);
    during a lingering close, its end.
    The deadline is a number; one timer per connection follows it lazily: a deadline later than
    the pending timer leaves the timer as it is, and the timer, when it fires early, re-arms
    itself for the deadline. A kept-alive connection sets a later deadline after every
    response: a timer made and cancelled each time (a heap push, and cancelled handles piling
    up in the loop's heap, two a request) was about 3 % of the event loop's samples at full
    ingest (issue 11, py-spy ``--gil``); now a connection's timer fires about once per header
    timeout.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _LingeringTransport(transport, self)  # type: ignore[assignment]
        self._timer: asyncio.TimerHandle | None = None  # fires at its when(), at or before the deadline
        self._deadline: float | None = None  # when the wait expires (loop time); None: no wait
        self._linger_end: float | None = None  # a lingering close ends by then at the latest (loop time)
        self.shutting_down = False  # the server is stopping: close, never linger
        self._arm(self.header_timeout, "headers")

    def _linger(self) -> None:
        """Send what is buffered and a FIN; discard what the client still sends (module docstring).
        Its end is the connection's deadline, on the connection's one timer:
        :data:`LINGER_IDLE_SECONDS` after the last chunk read, :data:`LINGER_SECONDS` at most."""
        try:
            self.transport.write_eof()  # what the wrapper holds first
        except OSError:
            # The client reset the connection meanwhile (ENOTCONN from shutdown()): nothing to
            # linger for. Raised into the request cycle, it logged an "unhandled error" with a
            # traceback, per connection, for anyone who opens and drops connections (a break run).
            self.transport.abort_linger()  # type: ignore[attr-defined]
            return
        self._linger_end = self.loop.time() + LINGER_SECONDS
        self._arm(min(LINGER_IDLE_SECONDS, LINGER_SECONDS), "linger")
        self.flow.resume_reading()  # uvicorn may have paused reads on a full request buffer
        self.transport.resume_reading()

    def _end_linger(self) -> None:
        self.transport.abort_linger()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self._linger_end is None:
            super().data_received(data)
            return
        left = self._linger_end - self.loop.time()
        if left <= 0:
            # Here, not only by the timer: a loop that finds data on the socket every pass runs
            # this before any timer due then (a review held connections for 110 s under a flood).
            self._end_linger()
            return
        self._arm(min(LINGER_IDLE_SECONDS, left), "linger")  # a later deadline: the timer is left as it is

    def eof_received(self) -> bool | None:  # type: ignore[override]
        if self._linger_end is not None:
            self._end_linger()  # the client has sent everything: the answer is with it
        return super().eof_received()

    def shutdown(self) -> None:
        # A server shutting down waits for no client: a linger under way ends, and none starts
        # later (uvicorn calls this once per connection; a review saw serve's exit wait 30 s).
        self.shutting_down = True
        if self._linger_end is not None:
            self._end_linger()
            return
        super().shutdown()

    def _arm(self, seconds: float, waiting_for: str) -> None:
        self._armed_cycle, self._waiting_for = self.cycle, waiting_for
        deadline = self._deadline = self.loop.time() + seconds
        if self._timer is None or self._timer.when() > deadline:
            self._schedule(deadline)

    def _schedule(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(at, self._expired)

    def _disarm(self) -> None:
        """No wait: the pending timer, if any, finds no deadline when it fires."""
        self._deadline = None

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if self._deadline is None or cycle is None:
            return
        if self._waiting_for == "headers" and cycle is not self._armed_cycle:
            if cycle.more_body:
                self._arm(self.body_timeout, "body")  # headers arrived; now the body
            else:
                self._disarm()
        elif self._waiting_for == "body" and cycle is self._armed_cycle and not cycle.more_body:
            self._disarm()

    def _expired(self) -> None:
        fired, self._timer = self._timer, None
        deadline = self._deadline
        if deadline is None:
            return
        if fired is not None and deadline > fired.when():  # the deadline moved on since it was set
            self._schedule(deadline)
            return
        self._deadline = None
        if self._waiting_for == "linger":
            self._end_linger()  # idle for LINGER_IDLE_SECONDS, or LINGER_SECONDS in all
            return
        if self.transport.is_closing() or self.cycle is not self._armed_cycle:
            return
        cycle = self.cycle
        if self._waiting_for == "headers":
            # No lingering close for a client too slow to send its headers, nor for one still
            # trickling a body after its answer (a review: held ~32 s instead of the 2 s timeout).
            self.transport.abort_linger()  # type: ignore[attr-defined]
        elif cycle is not None and cycle.more_body:
            # Tell the app the client is gone, then answer 408 unless a response has started;
            # no lingering close for a client this slow.
            cycle.disconnected = True
            cycle.message_event.set()
            if not cycle.response_started:
                self._send_408()
            self.transport.abort_linger()  # type: ignore[attr-defined]

    def _send_408(self) -> None:
        self._send_problem(408, "request_timeout", "the request body did not arrive in time")

    def send_400_response(self, msg: str) -> None:
        """What uvicorn answers a request h11 cannot parse (a bad request line, header line,
        ``Content-Length`` or chunk size, a ``Transfer-Encoding`` other than ``chunked``,
        headers over h11's size limit): problem details (DESIGN.md §6.1) instead of uvicorn's
        ``text/plain`` "Invalid HTTP request received.", then close. Called inside uvicorn's
        ``except h11.RemoteProtocolError``: the error's ``error_status_hint`` gives the status
        (431 for oversized headers, else 400). The detail is ours, never the parser's words,
        which may quote the request's bytes."""
        error = sys.exc_info()[1]
        status = getattr(error, "error_status_hint", 400)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # The app's task for this request may already be scheduled: what it sends now must
            # go nowhere (an h11 LocalProtocolError logged twice as "Exception in ASGI application"
            # otherwise), and a receive() it awaits must see the client gone.
            cycle.disconnected = True
            cycle.message_event.set()
        if status == 431:
            self._send_problem(431, "headers_too_large", "the request's headers are over the size limit")
        else:
            self._send_problem(400, "malformed_request", "the request is not valid HTTP/1.1 (its request line, "
                               "a header line, Content-Length, Transfer-Encoding or chunked framing)")
        self.transport.close()

    def _send_problem(self, status: int, code: str, detail: str) -> None:
        """Answer problem details from the protocol itself (no app cycle), ``Connection: close``,
        with ``X-Request-ID`` as every response has (README, "Logs"): the request's own id when
        its head was read (a 408, a bad chunk: the id its log lines carry), else a new one; once
        sent, an INFO log line with that id. Nothing is sent (or logged) when a response has
        started on this connection already (the app answered before a bad chunk came)."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):  # no response begun here
            return
        body = json.dumps(problem_body(status, code, detail)).encode()
        cycle = self.cycle  # a finished one is the previous request's, on a kept-alive connection
        rid = request_id_of(cycle.scope) if cycle is not None and not cycle.response_complete else request_id_for()
        headers = [(b"content-type", MEDIA_TYPE.encode()), (b"connection", b"close"),
                   (b"content-length", str(len(body)).encode()), (b"x-request-id", rid.encode("latin-1"))]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers,
                                                             reason=HTTPStatus(status).phrase.encode())) or b"")
            self.transport.write(self.conn.send(h11.Data(data=body)) or b"")
            self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError:
            return
        token = request_id.set(rid)
        try:
            log.info("answered %d %s from the HTTP protocol", status, code)
        finally:
            request_id.reset(token)

    def on_response_complete(self) -> None:
        # Armed before uvicorn's own, which parses a pipelined request already received (and
        # makes its cycle): armed after it, the header deadline was tied to that request's own
        # cycle, and the connection was cut at the deadline as if its headers never came (a
        # review: a long poll sent in one packet behind another request lost its answer).
        if not self.transport.is_closing():
            self._arm(self.header_timeout, "headers")
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()  # the loop holds no reference to this protocol after the connection
            self._timer = None
        super().connection_lost(exc)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run``/``uvicorn.Config``: the protocol class with
    ``settings.header_timeout_seconds`` and ``body_timeout_seconds``, and the keep-alive timeout."""
    protocol = type("SwitchboardHTTP", (HeaderTimeoutProtocol,),
                    {"header_timeout": float(settings.header_timeout_seconds),
                     "body_timeout": float(settings.body_timeout_seconds)})
    return {"http": protocol, "timeout_keep_alive": KEEP_ALIVE_SECONDS}


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (``port`` 0: the system chooses), for
    ``uvicorn.Server.run(sockets=[...])``: ``serve`` binds before it builds the app, so a port in
    use is a clear error and the port ``--port 0`` got is known to the app's links.

    Made with ``IPPROTO_TCP`` named. asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only
    on a socket whose ``proto`` says TCP, and an accepted connection takes the listener's: made
    with ``socket.socket(AF_INET)`` (proto 0), every connection of ``serve`` kept Nagle on, and
    a response written in two sends (uvicorn's head then body, a streamed body, an event stream's
    next event) waited for the client's delayed ACK, up to 40 ms. Measured with uvicorn's own
    protocol on such a socket (issue 11): the ack path at 15 % of the bare route, p50 48 ms,
    against 58 % with :class:`_LingeringTransport`'s one send per response; the bare route,
    bound by uvicorn itself, had it off.

    Raises:
        OSError: the address cannot be bound (``EADDRINUSE``, ``EADDRNOTAVAIL``, ...).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    return listener
