"""The request guard's cost on the webhook path: a 5 KB body through ``RequestGuard`` vs the same
bare ASGI app, in-process (no sockets), medians of many rounds; prints the figures and the ratio.

    .venv/bin/python -P bench/guard.py [--requests 20000] [--rounds 5]   (-P: bench/queue.py would shadow queue)

The guard buffers the body once (under the size and time limits, with the per-source count) and
replays it in one message; this measures exactly that against an app that reads the body and
answers 202.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from types import SimpleNamespace

import anyio

from switchboard.clock import SystemClock
from switchboard.config import Settings
from switchboard.web.guard import RequestGuard

BODY = b"x" * 5000
SOURCE_ID = "src_" + "abcdefgh234567" * 2


async def app(scope, receive, send):  # type: ignore[no-untyped-def]
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 202, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def run(target, n: int) -> float:  # type: ignore[no-untyped-def]
    scope = {"type": "http", "method": "POST", "path": f"/hooks/{SOURCE_ID}",
             "headers": [(b"content-length", str(len(BODY)).encode())]}

    async def send(message):  # type: ignore[no-untyped-def]
        return None

    started = time.perf_counter()
    for _ in range(n):
        sent = [False]

        async def receive(sent=sent):  # type: ignore[no-untyped-def]
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": BODY, "more_body": False}
            return {"type": "http.disconnect"}

        await target(dict(scope), receive, send)
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    # The source the URL names, as the source cache holds it after the first delivery (a hit).
    entry = SimpleNamespace(source=SimpleNamespace(id=SOURCE_ID, provider="github"))
    hub = SimpleNamespace(settings=Settings(), counters=Counter(), clock=SystemClock(),
                          source_cache=SimpleNamespace(peek=lambda source_id, now: entry))
    guarded = RequestGuard(app, hub)  # type: ignore[arg-type]
    bare, through = [], []
    for _ in range(ns.rounds):
        bare.append(anyio.run(run, app, ns.requests))
        through.append(anyio.run(run, guarded, ns.requests))
    b, g = statistics.median(bare), statistics.median(through)
    print(f"bare app: {b:.1f} us/request; through the guard: {g:.1f} us/request; "
          f"guard adds {g - b:.1f} us ({g / b:.2f}x of the bare app); medians of {ns.rounds} x {ns.requests}")


if __name__ == "__main__":
    main()
