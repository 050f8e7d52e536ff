"""The receiver's own cost per delivery, in process (issue 11): no sockets, no server.

Builds the hub's ASGI app on a fresh SQLite instance (``bench.ingest``'s: a GitHub source) and
calls it directly on the ASGI interface with distinct signed 5 KB GitHub ``issues`` deliveries,
its delivery writer replaced by one that answers "stored" at once; then the bare async route of
``bench/bare_apps.py`` the same way with the same requests. What is left is what the event loop
spends on a delivery in our code (the middleware, the guard, verification, the admit, the row,
the answer) against what Starlette spends on a bare 202: the part of ``bench/ingest.py``'s loop
figure that this code owns, without the noise of sockets, the load generator and the other
processes. Prints microseconds per request (the best pass of ``--passes``, each of
``--requests`` requests) and their ratio; ``--profile`` adds cProfile's top functions.

Usage::

    .venv/bin/python bench/receiver.py [--requests 3000] [--passes 5] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from bench import ingest  # noqa: E402  (instance set-up, signed requests)


class _Stored:
    """A delivery writer that answers at once: the receiver's work without the database. The
    body's admit, which the real writers run in their own thread or process for most adapters
    (``admit``: ``ingest.admit_row``), is not the event loop's, so it is not run here."""

    async def store(self, row: dict[str, Any], stamp: int, dispatch: bool = True,
                    admit: str | None = None) -> tuple[str, str | None]:
        return "stored", row["id"]

    def close(self) -> None:
        """Nothing to stop (``Hub.close`` closes its writer)."""


def _scopes(path: str, n: int) -> list[tuple[dict[str, Any], bytes]]:
    """``n`` ASGI scopes and bodies from ``bench.ingest``'s signed requests (as h11 gives them:
    lower-case header names)."""
    out = []
    for raw in ingest.github_requests(path, n):
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")[1:]
        headers = [(name.strip().lower(), value.strip()) for name, _, value in (line.partition(b":") for line in lines)]
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": headers, "client": ("127.0.0.1", 50000),
                 "server": ("127.0.0.1", 8080)}
        out.append((scope, body))
    return out


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> int:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({**scope, "state": {}}, receive, send)
    return int(sent[0]["status"])


async def _pass(app: Any, requests: list[tuple[dict[str, Any], bytes]], expect: int) -> float:
    began = time.perf_counter()
    for scope, body in requests:
        status = await _call(app, scope, body)
        if status != expect:
            raise SystemExit(f"answered {status}, not {expect}: the bench's set-up is broken")
    return (time.perf_counter() - began) / len(requests) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="requests per pass")
    parser.add_argument("--passes", type=int, default=5, help="passes per app; the best is reported")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of one more pass")
    args = parser.parse_args()

    from bench.bare_apps import async_app
    from switchboard.config import Settings
    from switchboard.web.asgi import create_app

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "instance"
        source, _ = ingest._configure(home)
        app = create_app(Settings(home=home), migrate=False)
        hub = app.state.hub
        hub._delivery_writer = _Stored()
        path = f"/hooks/{source}"
        try:
            asyncio.run(_pass(app, _scopes(path, 20), 202))  # warm: the source cache, imports
            gc.collect()
            gc.freeze()  # as serve does after start-up (Hub.settle)
            hook, bare = [], []
            for _ in range(args.passes):
                # Fresh deliveries every pass: a repeat would be a duplicate (a shortcut).
                requests = _scopes(path, args.requests)
                hook.append(asyncio.run(_pass(app, requests, 202)))
                bare.append(asyncio.run(_pass(async_app, requests, 202)))
            print(f"in process, {args.requests} distinct signed 5 KB GitHub deliveries a pass, best of {args.passes}:")
            print(f"  hub app (POST /hooks/<id>, writer answering at once)  {min(hook):8.1f} µs a request")
            print(f"  bare async route (bench/bare_apps.py)                 {min(bare):8.1f} µs a request")
            print(f"  ratio                                                 {min(hook) / min(bare):8.2f}")
            if args.profile:
                requests = _scopes(path, args.requests)
                profile = cProfile.Profile()
                profile.enable()
                asyncio.run(_pass(app, requests, 202))
                profile.disable()
                pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(25)
        finally:
            hub.close()


if __name__ == "__main__":
    main()
