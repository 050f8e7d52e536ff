"""What ``serve``'s HTTP protocol writes to a connection's socket (issue 11): one ``send`` per
response instead of one for its head and one for its body, and a large or streamed body still
whole and in order (``switchboard.web.server_protocol._LingeringTransport``)."""

from __future__ import annotations

import asyncio.selector_events
import errno
import json
import socket
import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest

from tests.conftest import LiveApp, read_response


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Calls of the real socket transport's ``write`` in this process, by the client port of
    the connection (the peer's port, as the server sees it)."""
    counts: Counter[int] = Counter()
    lock = threading.Lock()
    real = asyncio.selector_events._SelectorSocketTransport.write

    def counted(self: Any, data: Any) -> None:
        peer = self.get_extra_info("peername")
        if isinstance(peer, tuple) and data:
            with lock:
                counts[peer[1]] += 1
        real(self, data)

    monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", counted)
    return counts


def test_each_response_leaves_in_one_send(live: LiveApp, sends: Counter[int]) -> None:
    # uvicorn's h11 protocol writes a response's head, then its body: two system calls each,
    # a tenth of serve's CPU at full ingest. Held for the event loop's pass, they leave as one.
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock, sock.makefile("rb") as stream:
        for _ in range(5):
            sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: t\r\n\r\n")
            head, body = read_response(stream)
            assert head.startswith(b"HTTP/1.1 200") and json.loads(body)["status"] == "ok"
        client_port = sock.getsockname()[1]
    assert sends[client_port] == 5


def test_a_large_body_arrives_whole_and_in_order(live: LiveApp) -> None:
    spec = httpx2.get(f"{live.url}/api/v1/openapi.json", timeout=30)
    assert spec.status_code == 200 and len(spec.content) > 16 * 1024
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock, sock.makefile("rb") as stream:
        for _ in range(3):
            sock.sendall(b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: t\r\n\r\n"
                         b"GET /api/v1/health HTTP/1.1\r\nHost: t\r\n\r\n")  # pipelined
            head, body = read_response(stream)
            assert head.startswith(b"HTTP/1.1 200") and body == spec.content
            head, body = read_response(stream)
            assert json.loads(body)["status"] == "ok"


async def _wrapped_connection() -> tuple[Any, Any, asyncio.Future[bytes], asyncio.Server]:
    """A real TCP connection to a local server that reads until EOF: ``(the client's transport
    wrapped in _LingeringTransport, that transport, the bytes the server read, the server)``."""
    from switchboard.web.server_protocol import _LingeringTransport

    loop = asyncio.get_running_loop()
    received: asyncio.Future[bytes] = loop.create_future()

    async def reader(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        received.set_result(await r.read(-1))
        w.close()

    server = await asyncio.start_server(reader, "127.0.0.1", 0)
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", server.sockets[0].getsockname()[1])
    held = _LingeringTransport(transport, SimpleNamespace(loop=loop))  # type: ignore[arg-type]
    return held, transport, received, server


def test_held_bytes_past_the_limit_go_to_the_transport_in_the_same_pass(sends: Counter[int]) -> None:
    # Past CORK_BYTES the held bytes go to the socket transport at once, not at the end of the
    # pass, so that its flow control (pause_writing at its high-water mark) sees a body written
    # in many pieces without an await between them as it did before.
    from switchboard.web.server_protocol import CORK_BYTES

    async def run() -> tuple[int, int]:
        held, transport, received, server = await _wrapped_connection()
        server_port = transport.get_extra_info("peername")[1]
        piece = CORK_BYTES // 4 + 1
        payload = b"".join(bytes([n]) * piece for n in range(8))
        for n in range(8):  # 8 pieces, no await: two crossings of the limit
            held.write(bytes([n]) * piece)
        in_pass = sends[server_port]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        after = sends[server_port]
        transport.write_eof()
        assert await asyncio.wait_for(received, 20) == payload
        transport.close()
        server.close()
        return in_pass, after

    in_pass, after = asyncio.run(run())
    assert in_pass == 2 and after == 2  # pieces 1-4 and 5-8, each once the limit was passed


def test_what_is_held_leaves_before_an_eof() -> None:
    # A review: write_eof() passed straight to the transport, and the held bytes' flush then
    # raised "Cannot call write() after write_eof()"; the peer read nothing.
    async def run() -> bytes:
        held, transport, received, server = await _wrapped_connection()
        held.write(b"hello")
        held.write_eof()
        data = await asyncio.wait_for(received, 20)
        transport.close()
        server.close()
        return data

    assert asyncio.run(run()) == b"hello"


def test_serve_turns_nagle_off_on_every_connection(live: LiveApp, monkeypatch: pytest.MonkeyPatch) -> None:
    # serve binds its own listening socket (server_protocol.listening_socket) and hands it to
    # uvicorn. Made as socket.socket(AF_INET), its proto was 0, and asyncio sets TCP_NODELAY only
    # on sockets whose proto says TCP: every connection kept Nagle's algorithm, and a response
    # written in two sends waited for the client's delayed ACK (uvicorn's own protocol on it:
    # p50 48 ms at 16 connections; issue 11). The live app is served on such a socket, as serve
    # does it (tests.conftest.serve_in_thread).
    from switchboard.web.server_protocol import listening_socket

    nodelay: list[int] = []
    real = asyncio.selector_events._SelectorSocketTransport.write

    def recording(self: Any, data: Any) -> None:
        sock = self.get_extra_info("socket")
        if isinstance(self.get_extra_info("peername"), tuple):
            nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        real(self, data)

    monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", recording)
    with listening_socket("127.0.0.1", 0) as listener:
        assert listener.proto == socket.IPPROTO_TCP
    for _ in range(3):
        assert httpx2.get(f"{live.url}/api/v1/health", timeout=10).status_code == 200
    assert nodelay and all(nodelay), nodelay


def test_the_listening_socket_names_a_port_in_use() -> None:
    from switchboard.web.server_protocol import listening_socket

    first = listening_socket("127.0.0.1", 0)
    try:
        first.listen()
        with pytest.raises(OSError) as raised:
            listening_socket("127.0.0.1", first.getsockname()[1])
        assert raised.value.errno == errno.EADDRINUSE
    finally:
        first.close()
