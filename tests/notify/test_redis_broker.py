"""Scaled mode's broker on a real Redis: a batch's wakes in one round trip (issue 11)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from switchboard.notify.broker import EVENT_CHANNEL, WAKE_CHANNEL, RedisBroker
from switchboard.notify.wakes import Wake
from tests.conftest import wait_for


def _wake(n: int) -> Wake:
    return Wake(todo_id=f"td_{n}", project="acme", queue="reviews", kind="github.issues", provider="github",
                title=f"Issue #{n}", agent_ids=["agt_a"])


def test_a_batchs_wakes_go_in_order_in_one_round_trip(redis_url: str) -> None:
    # A worker spent about an eighth of its time on one PUBLISH round trip per wake.
    listener = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(WAKE_CHANNEL)
    broker = RedisBroker(redis_url, streams=None)
    sent: list[Any] = []
    try:
        connection = broker._redis.connection_pool.get_connection()
        original = connection.send_packed_command
        connection.send_packed_command = lambda *a, **k: (sent.append(a), original(*a, **k))[1]
        broker._redis.connection_pool.release(connection)
        broker.publish_wakes([_wake(n) for n in range(5)])
        broker.publish_wakes([])  # nothing to send: no round trip
        assert len(sent) == 1
        got: list[str] = []
        deadline = time.monotonic() + 5
        while len(got) < 5 and time.monotonic() < deadline:
            message = listener.get_message(timeout=0.5)
            if message is not None:
                got.append(json.loads(message["data"])["todo_id"])
        assert got == [f"td_{n}" for n in range(5)]
    finally:
        broker.close()
        listener.close()


def test_a_redis_that_is_down_loses_the_doorbells_not_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    from tests.conftest import free_port

    broker = RedisBroker(f"redis://127.0.0.1:{free_port()}/0", streams=None)
    try:
        broker.publish_wakes([_wake(1), _wake(2)])  # does not raise
    finally:
        broker.close()
    assert "could not publish 2 wakes (ConnectionError); the todos stay pending" in caplog.text


class _Streams:
    """Stands in for a ``serve``'s attached sessions: records what reaches them."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.delivered: list[str] = []
        self.fail_on = fail_on

    def deliver(self, wake: Wake) -> None:
        if wake.todo_id == self.fail_on:
            raise RuntimeError("a fault in delivering")
        self.delivered.append(wake.todo_id)

    def nudge(self, agent_id: str, session_id: str | None) -> None:
        self.delivered.append(f"nudge {agent_id}")


def test_a_malformed_or_failing_message_is_reported_as_such_and_the_next_one_goes_through(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    # Review: '[1]' on the wake channel logged "wake listener lost Redis (AttributeError)" and
    # stalled the listener 0.5 s, and a fault in delivering would have read the same, with no
    # traceback.
    streams = _Streams(fail_on="td_2")
    broker = RedisBroker(redis_url, streams=streams)  # type: ignore[arg-type]
    publisher = redis.Redis.from_url(redis_url)
    try:
        # Until the listener is subscribed to both channels (Redis drops what it has no subscriber for).
        wait_for(lambda: all(n >= 1 for _, n in publisher.pubsub_numsub(WAKE_CHANNEL, EVENT_CHANNEL)), timeout=20)
        for data in ("[1]", '"x"', "{", json.dumps({"todo_id": "td_0"})):
            publisher.publish(WAKE_CHANNEL, data)
        publisher.publish(EVENT_CHANNEL, "[1]")
        publisher.publish(WAKE_CHANNEL, json.dumps(_wake(2).to_dict()))  # delivering it fails
        publisher.publish(WAKE_CHANNEL, json.dumps(_wake(1).to_dict()))
        wait_for(lambda: "td_1" in streams.delivered, timeout=20)
        assert streams.delivered == ["td_1"]
    finally:
        broker.close()
        publisher.close()
    assert "lost Redis" not in caplog.text  # no back-off stall behind the failures (it logs this)
    assert caplog.text.count("ignored a malformed wake message") == 4
    assert "ignored a malformed message on switchboard:agent-events" in caplog.text
    assert "could not handle a message on switchboard:wakes" in caplog.text and "a fault in delivering" in caplog.text


def test_closing_the_broker_is_not_reported_as_a_lost_redis(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    # Both reviews of this round saw "wake listener lost Redis (ValueError)" on a clean shutdown.
    for _ in range(5):
        broker = RedisBroker(redis_url, streams=_Streams())  # type: ignore[arg-type]
        time.sleep(0.2)
        broker.close()
        time.sleep(0.3)
    assert "lost Redis" not in caplog.text


def test_a_broker_closed_right_after_it_started_closes_cleanly(redis_url: str) -> None:
    # Closing the pub/sub connection while the listener thread was still starting raised
    # AttributeError out of PubSub.close, which broke a Redis-mode app's shutdown (seen in a test
    # whose app lived a few milliseconds).
    for _ in range(10):
        RedisBroker(redis_url, streams=_Streams()).close()  # type: ignore[arg-type]
