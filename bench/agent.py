"""Agent-surface benchmark (issue 6, DESIGN.md §8): the cost of the notifications trailer when
nothing is pending, and ``inbox_wait`` wake-up latency.

Usage::

    python bench/agent.py [--calls 2000] [--events 20000] [--wakes 50]

Set-up: SQLite (embedded default), one agent with work on two projects, one unscoped and one
scoped subscription, ``--events`` feed events (todos) and 200 already-delivered answers, so the
trailer's probe has real rows to skip. Nothing is pending during the timed calls.

1. ``whoami`` in the hub (``calls.call_tool``), alternating with and without the trailer: median
   per call and the ratio (goal: the trailer adds at most 10 %).
2. The same over ``/mcp`` (Streamable HTTP, real MCP client, raw results): median round trip
   with the trailer (what an agent pays end to end) beside the hub-side figures.
3. ``inbox_wait`` over ``/mcp``: a question is answered through the hub (as the REST route
   does: commit, then the broker's doorbell); latency from the answer's commit to the result
   at the client, median and p99 (goal: within 100 ms).

Machines are shared and noisy: compare the ratio, not the absolute figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds queue.py: take this folder off the path so `import queue` finds the stdlib.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import statistics
import tempfile
import threading
import time
from typing import Any

import anyio
import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter
from sqlalchemy import update

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub
from switchboard.inbox import items as inbox
from switchboard.mcp_server.calls import call_tool
from switchboard.mcp_server.specs import Caller
from switchboard.models import Todo
from switchboard.notify import subscriptions, trailer
from switchboard.queue import todos

RAW = TypeAdapter(dict[str, Any])


def setup(settings: Settings, events: int) -> tuple[str, Caller]:
    """Migrate and fill the instance; return the agent token and its caller."""
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            acme, beta = admin.add_project(s, "acme"), admin.add_project(s, "beta")
            agent = admin.add_agent(s, "bench", "alice")
            admin.grant(s, "bench", "acme", "work")
            admin.grant(s, "bench", "beta", "work")
            token = admin.vend_token(s, "bench")
            grants = admin.grants_of(s, agent.id)
            subscriptions.subscribe(s, hub.clock, agent.id, grants, ["question.answered"])
            subscriptions.subscribe(s, hub.clock, agent.id, grants, ["approval.decided"], "beta")
        for start in range(0, events, 1000):
            with hub.db.write() as s:
                for n in range(start, min(events, start + 1000)):
                    todos.create(s, hub.clock, project_id=(acme if n % 2 else beta).id, queue="q", kind="manual",
                                 title=f"work {n}", payload=None)
        # The todos are feed fodder: mark them done, or the maintenance pass would ring and
        # re-ring thousands of pending todos while holding SQLite's one writer (that is the
        # wake path's cost, measured by the queue bench, not this one's).
        with hub.db.write() as s:
            s.execute(update(Todo).values(state="done"))
        for n in range(200):
            with hub.db.write() as s:
                item = inbox.post(s, hub.clock, agent_id=agent.id, grants=grants, kind="question", project="acme",
                                  title=f"q{n}")
                inbox.resolve(s, hub.clock, item["id"], via="cli", human_id=agent.human_id, answer="ok")
        while trailer.collect(hub.db, agent.id):  # deliver everything: nothing pending from here on
            pass
        return token, Caller(agent.id, agent.name, agent.human_id)
    finally:
        hub.close()


def hub_side(settings: Settings, caller: Caller, calls: int) -> tuple[float, float]:
    """Median microseconds of ``whoami`` in the hub without and with the trailer."""
    hub = Hub(settings, role="cli")
    try:
        plain: list[float] = []
        with_trailer: list[float] = []
        for _ in range(200):  # warm the pools and caches
            call_tool(hub, caller, "whoami", {}, with_trailer=True)
        for i in range(calls * 2):
            flag = i % 2 == 1
            t0 = time.perf_counter()
            result = call_tool(hub, caller, "whoami", {}, with_trailer=flag)
            elapsed = (time.perf_counter() - t0) * 1e6
            assert "notifications" not in result
            (with_trailer if flag else plain).append(elapsed)
        return statistics.median(plain), statistics.median(with_trailer)
    finally:
        hub.close()


def serve(settings: Settings) -> tuple[str, Hub, uvicorn.Server, threading.Thread]:
    import socket

    from switchboard.web.asgi import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = settings.with_overrides(port=port)
    app = create_app(settings, migrate=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", app.state.hub, server, thread


async def over_http(url: str, hub: Hub, token: str, caller: Caller, calls: int, wakes: int) -> dict[str, float]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=90) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as client:
            async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                req = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=args))
                return await client.session.send_request(req, RAW)  # type: ignore[arg-type]

            for _ in range(50):
                await call("whoami", {})
            rtt = []
            for _ in range(calls // 4):
                t0 = time.perf_counter()
                result = await call("whoami", {})
                rtt.append((time.perf_counter() - t0) * 1e6)
                assert "notifications" not in result

            latencies = []
            for _ in range(wakes):
                q = (await call("question_post", {"project": "acme", "title": "bench?"}))["structuredContent"]
                answered: dict[str, float] = {}

                async def wait() -> None:
                    result = await call("inbox_wait", {"wait_seconds": 30})
                    answered["back"] = time.perf_counter()
                    assert result["structuredContent"]["resolved"], result

                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait)
                    while hub.inbox_waiters.count() == 0:
                        await anyio.sleep(0.002)

                    def answer() -> None:
                        with hub.db.write() as s:
                            inbox.resolve(s, hub.clock, q["id"], via="rest", human_id=caller.human_id, answer="ok")
                        answered["committed"] = time.perf_counter()
                        hub.broker.publish_inbox(caller.agent_id)

                    await anyio.to_thread.run_sync(answer)
                latencies.append((answered["back"] - answered["committed"]) * 1e3)
                await call("whoami", {})  # take the attention item off the next round
    latencies.sort()
    return {"rtt_us": statistics.median(rtt), "wake_p50_ms": statistics.median(latencies),
            "wake_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "wake_max_ms": latencies[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--wakes", type=int, default=50)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        token, caller = setup(settings, opts.events)
        plain, with_trailer = hub_side(settings, caller, opts.calls)
        print(f"whoami in the hub, median of {opts.calls} each (SQLite, {opts.events} events, 2 subscriptions):")
        print(f"  without trailer: {plain:8.1f} us")
        print(f"  with trailer   : {with_trailer:8.1f} us  (nothing pending: one probe query)")
        print(f"  trailer adds   : {with_trailer - plain:8.1f} us = {100 * (with_trailer - plain) / plain:.1f} %"
              f"  (goal <= 10 %)")
        url, hub, server, thread = serve(settings)
        try:
            figures = anyio.run(over_http, url, hub, token, caller, opts.calls, opts.wakes)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
        print(f"whoami over /mcp (Streamable HTTP, raw result, with trailer): median {figures['rtt_us']:.0f} us "
              f"round trip; the hub-side trailer cost is {100 * (with_trailer - plain) / figures['rtt_us']:.1f} % "
              "of it")
        print(f"inbox_wait wake-up over /mcp, {opts.wakes} answers: p50 {figures['wake_p50_ms']:.1f} ms, "
              f"p99 {figures['wake_p99_ms']:.1f} ms, max {figures['wake_max_ms']:.1f} ms (goal <= 100 ms)")


if __name__ == "__main__":
    main()
