"""Scaled mode's broker on a real Redis: a batch's wakes in one round trip (issue 11)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from switchboard.notify.broker import WAKE_CHANNEL, RedisBroker
from switchboard.notify.wakes import Wake


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
