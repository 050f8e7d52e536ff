"""Wakes pushed to the stream with the id of the event before them (issue 11): a stream at that
position sends the wake without reading the ledger; anything else is read, so a resume still
has no gap and no duplicate (DESIGN.md §6.5a; the database stays the ledger, rule 1).

The stream read the ledger after every nudge: a worker thread and two passes of the event loop
per processed batch, a third of the delivery-to-wake time at full ingest speed (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Iterator
from dataclasses import replace

import anyio
import pytest

from switchboard.hub import Hub
from switchboard.notify import broker, sessions
from switchboard.notify.wakes import Wake
from tests.conftest import LiveApp, World
from tests.notify.test_sessions import _agent


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _sub(loop: asyncio.AbstractEventLoop) -> broker.Subscriber:
    sub = broker.Subscriber("agt_1", loop, session_id="ses_a")
    assert sub.take(0) == ([], True)  # a fresh stream reads first (a resume, the attach ring)
    return sub


def test_pushed_events_that_follow_on_are_taken_without_a_read(loop: asyncio.AbstractEventLoop) -> None:
    sub = _sub(loop)
    sub.push(5, 3, "wake", '{"n": 5}')
    sub.push(6, 5, "wake", '{"n": 6}')
    sub.push(9, 6, "wake", '{"n": 9}')  # 7 and 8 went to other sessions
    assert sub.take(3) == ([(5, "wake", '{"n": 5}'), (6, "wake", '{"n": 6}'), (9, "wake", '{"n": 9}')], False)
    assert sub.take(9) == ([], False)


def test_a_pushed_event_with_something_unseen_before_it_asks_for_a_read(loop: asyncio.AbstractEventLoop) -> None:
    sub = _sub(loop)
    sub.push(5, 3, "wake", "a")
    sub.push(8, 7, "wake", "b")  # 7 (a doorbell, a re-ring, another worker's wake) was not pushed
    sub.push(9, 8, "wake", "c")
    # 5 goes out; the read from 5 finds 7, 8 and 9: nothing after the gap is taken from memory.
    assert sub.take(3) == ([(5, "wake", "a")], True)
    assert sub.take(9) == ([], False)


def test_events_already_sent_are_dropped_and_a_nudge_always_reads(loop: asyncio.AbstractEventLoop) -> None:
    sub = _sub(loop)
    sub.push(5, 3, "wake", "a")
    sub.push(6, 5, "wake", "b")
    assert sub.take(5) == ([(6, "wake", "b")], False)  # 5 came with an earlier read
    sub.push(7, 6, "wake", "c")
    sub.nudge()  # an event that was not pushed: the ledger is read after what follows on
    assert sub.take(6) == ([(7, "wake", "c")], True)
    sub.look()
    assert sub.take(7) == ([], True)


def test_a_stream_that_falls_behind_its_pushes_reads_instead(loop: asyncio.AbstractEventLoop) -> None:
    sub = _sub(loop)
    for n in range(1, broker.PUSH_LIMIT + 11):
        sub.push(n, n - 1, "wake", str(n))
    rows, read = sub.take(0)  # the oldest ten were dropped: a gap after position 0
    assert (rows, read) == ([], True)


def test_a_wake_keeps_the_event_before_it_and_its_text_in_its_dict() -> None:
    wake = Wake("td_1", "acme", "reviews", "github.issues", "github", "t", ["agt_1"], agent_id="agt_1",
                session_id="ses_a", event_id=12, prev_event_id=9, event_text='{"content": "t"}')
    assert Wake.from_dict(json.loads(json.dumps(wake.to_dict()))) == wake  # Redis
    assert Wake.from_dict(pickle.loads(pickle.dumps(wake.to_dict()))) == wake  # the processing pipe


def test_a_pushed_wake_reaches_only_a_stream_of_its_own_agent(loop: asyncio.AbstractEventLoop) -> None:
    streams = broker.AgentStreams()
    other = broker.Subscriber("agt_other", loop, session_id="ses_a")
    streams.attach(other)
    other.take(0)
    wake = Wake("td_1", "acme", "reviews", "manual", "api", "t", ["agt_1"], agent_id="agt_1", session_id="ses_a",
                event_id=5, prev_event_id=0, event_text="{}")
    assert streams.deliver(wake) is False
    assert other.take(0) == ([], False)  # neither pushed nor nudged
    mine = broker.Subscriber("agt_1", loop, session_id="ses_a")
    streams.attach(mine)
    mine.take(0)
    assert streams.deliver(wake) is True
    assert mine.take(0) == ([(5, "wake", "{}")], False)
    assert streams.deliver(replace(wake, event_text=None)) is True  # nothing to push: a nudge
    assert mine.take(5) == ([], True)


def test_link_names_the_event_before_each_wake_on_its_own_stream(hub: Hub) -> None:
    agent_id = _agent(hub)
    with hub.db.write() as s:
        emit = lambda session_id, kind: sessions.emit(s, hub.clock, agent_id, session_id, kind, {"k": kind})
        first_a = emit("ses_a", "wake")
        first_b = emit("ses_b", "wake")
        broadcast = emit(None, "doorbell")  # any session of the agent
        second_a, second_b = emit("ses_a", "wake"), emit("ses_b", "wake")
        emit("ses_a", "doorbell_ring")  # hidden: never streamed, so never the event before one
        third_a = emit("ses_a", "wake")
        wakes = [Wake(f"td_{n}", "acme", "q", "manual", "api", "t", [agent_id], agent_id=agent_id, session_id=sid,
                      event_id=n) for n, sid in ((first_a, "ses_a"), (first_b, "ses_b"), (second_a, "ses_a"),
                                                 (second_b, "ses_b"), (third_a, "ses_a"))]
        unrouted = Wake("td_x", "acme", "q", "manual", "api", "t", [agent_id])
        linked = sessions.link(s, [*wakes, unrouted])
    if not hub.db.is_sqlite:  # ids are not given in commit order: the streams read the ledger
        assert linked == [*wakes, unrouted]
        return
    assert [w.prev_event_id for w in linked] == [0, 0, broadcast, broadcast, second_a, None]
    with hub.db.read() as s:  # what each stream would read after that position starts with this wake
        for wake in linked[:-1]:
            assert wake.prev_event_id is not None and wake.session_id is not None
            after = sessions.read_after(s, agent_id, wake.session_id, wake.prev_event_id, limit=1)
            assert [e.id for e in after] == [wake.event_id]
            assert wake.event_text == json.dumps(wake.event_data())


def test_link_looks_back_a_bounded_window_and_leaves_an_older_previous_event_to_a_read(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose last event is far back (another session of the agent busy meanwhile):
    the read under the write lock stops at the window, and the wake goes as a nudge."""
    monkeypatch.setattr(sessions, "LINK_WINDOW", 20)
    agent_id = _agent(hub)
    with hub.db.write() as s:
        old = sessions.emit(s, hub.clock, agent_id, "ses_a", "wake", {})
        for _ in range(30):
            sessions.emit(s, hub.clock, agent_id, "ses_b", "wake", {})
        far = sessions.emit(s, hub.clock, agent_id, "ses_a", "wake", {})
        near = sessions.emit(s, hub.clock, agent_id, "ses_a", "wake", {})
        wakes = [Wake(f"td_{n}", "acme", "q", "manual", "api", "t", [agent_id], agent_id=agent_id,
                      session_id="ses_a", event_id=n) for n in (old, far, near)]
        linked = sessions.link(s, wakes)
    if hub.db.is_sqlite:
        assert [(w.prev_event_id, w.event_text is None) for w in linked] == [(0, False), (None, True), (far, False)]


def test_a_processed_batch_publishes_linked_wakes(world: World) -> None:
    from tests.queue.test_jobs import ISSUE, _store

    hub = Hub(world.settings, role="cli")
    try:
        with hub.db.write() as s:
            for sid in ("ses_1", "ses_2"):  # two live sessions: the batch's wakes go round them
                sessions.attach(s, hub.clock, world.agent_id, sid, f"stm_{sid}")
        ids = []
        for n in range(4):
            payload = json.loads(json.dumps(ISSUE))
            payload["issue"]["id"] += n
            payload["issue"]["number"] += n
            ids.append(_store(hub, world, payload))
        published: list[Wake] = []
        hub.broker.publish_wakes = published.extend  # type: ignore[method-assign]
        from switchboard.queue.jobs import process_batch

        assert process_batch(hub, ids) == ["processed"] * 4
        assert len(published) == 4 and {w.session_id for w in published} == {"ses_1", "ses_2"}
        with hub.db.read() as s:
            for wake in published:
                assert wake.prev_event_id is not None and wake.session_id is not None
                after = sessions.read_after(s, world.agent_id, wake.session_id, wake.prev_event_id, limit=1)
                assert [e.id for e in after] == [wake.event_id]
    finally:
        hub.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_live_stream_sends_pushed_wakes_without_reading_and_reads_across_a_gap(
    live: LiveApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    from switchboard.notify.wakes import route
    from switchboard.queue.child import ProcessDispatcher
    from switchboard.web import agent_api
    from tests.web.test_agent_stream import open_stream

    reads: list[int] = []
    real_read = agent_api._read

    def counting_read(*args: object) -> object:
        reads.append(1)
        return real_read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(agent_api, "_read", counting_read)
    monkeypatch.setattr(agent_api, "HEARTBEAT_SECONDS", 600)  # a heartbeat reads the ledger
    agent_id = live.world.agent_id
    relay = ProcessDispatcher.__new__(ProcessDispatcher)  # serve's side of the processing pipe, no child
    relay._broker = live.hub.broker

    def wake(title: str, push: bool = True) -> int:
        """Write a wake for ses_test as processing does (linked), and publish it or not."""
        with live.hub.db.write() as s:
            target = sessions.Target(agent_id, "ses_test")
            routed = route(s, live.hub.clock, Wake(f"td_{title}", "acme", "reviews", "manual", "api", title,
                                                    [agent_id]), target)
            [routed] = sessions.link(s, [routed])
        if push:  # through the pipe's pickling and serve's side of it (ProcessDispatcher._apply)
            relay._apply(pickle.loads(pickle.dumps(("batch", [("wake", routed.to_dict())]))))
        assert routed.event_id is not None
        return routed.event_id

    async with open_stream(live) as stream:
        await stream.line()  # attached: the stream reads the ledger once
        with anyio.fail_after(10):
            while not reads:
                await anyio.sleep(0.01)
        pushed = [await anyio.to_thread.run_sync(wake, f"p\u00e9{n}") for n in range(3)]
        texts = []
        while len(texts) < 3:  # the raw data lines: byte for byte what a read of the ledger sends
            line = await stream.line()
            if line.startswith("data:"):
                texts.append(line.removeprefix("data:").strip())
        assert len(reads) == 1  # all three without a read
        ledger = await anyio.to_thread.run_sync(real_read, live.hub, agent_id, "ses_test", pushed[0] - 1)
        assert [(event_id, text) for event_id, _, text in ledger] == list(zip(pushed, texts, strict=True))

        unseen = await anyio.to_thread.run_sync(lambda: wake("unseen", push=False))
        after = await anyio.to_thread.run_sync(wake, "after")
        got = [await stream.event() for _ in range(2)]
        assert [int(e["id"]) for e in got] == [unseen, after]  # in order, nothing twice
        assert len(reads) == 2  # the gap was read
    monkeypatch.setattr(agent_api, "_read", real_read)
    async with open_stream(live, last=str(pushed[0])) as again:  # a resume: the ledger, as before
        await again.line()
        assert [int((await again.event())["id"]) for _ in range(4)] == [*pushed[1:], unseen, after]
