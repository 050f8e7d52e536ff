"""A live app with one source per provider and alice linked on each (for the HTTP tests)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
from urllib.parse import urlsplit

from switchboard import admin
from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.models import Delivery
from switchboard.sources import PROVIDERS
from tests.conftest import configure, serve_in_thread, wait_for
from tests.signers import SECRETS, SENDERS


@dataclass
class MultiApp:
    """The served app, its hub, and ``sources[provider] = source id``."""

    url: str
    hub: Hub
    sources: dict[str, str]

    def post(self, provider: str, body: bytes, headers: dict[str, str]) -> httpx2.Response:
        return httpx2.post(f"{self.url}/hooks/{self.sources[provider]}", content=body, headers=headers, timeout=30)

    def post_raw(self, provider: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        """POST with headers written verbatim on the socket; returns ``(status, body text)``."""
        parts = urlsplit(self.url)
        head = f"POST /hooks/{self.sources[provider]} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head += f"Content-Length: {len(body)}\r\n\r\n"
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(head.encode("latin-1") + body)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        answer = b"".join(chunks).decode("latin-1")
        status = int(answer.split(" ", 2)[1])
        return status, answer.split("\r\n\r\n", 1)[1] if "\r\n\r\n" in answer else ""

    def delivery(self, delivery_id: str) -> Delivery:
        with self.hub.db.read() as s:
            row = s.get(Delivery, delivery_id)
            assert row is not None
            return row

    def processed(self, delivery_id: str) -> Delivery:
        return wait_for(lambda: (d := self.delivery(delivery_id)).status != "received" and d)


def configure_all(settings: Settings) -> dict[str, str]:
    """Configure the GitHub world, then a source per other provider with alice linked on each."""
    world = configure(settings)
    sources = {"github": world.source_id}
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            for provider in PROVIDERS:
                if provider == "github":
                    continue
                src, _ = admin.add_source(s, "acme", provider, SECRETS[provider], queue="chat")
                sources[provider] = src.id
                ws, uid = SENDERS[provider]
                admin.link_identity(s, "alice", provider, src.id if uid == "<source>" else uid, ws)
    finally:
        hub.close()
    return sources


def serve_all(settings: Settings) -> Iterator[MultiApp]:
    sources = configure_all(settings)
    for url, hub in serve_in_thread(settings):
        yield MultiApp(url, hub, sources)
