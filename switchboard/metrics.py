"""Prometheus metrics (``GET /metrics``), behind small functions the hot path calls in one line.

Two kinds of figures:

- **Events** counted where they happen, with ``prometheus-client``: deliveries by provider and
  outcome, processing time, delivery → wake time, vault fetches. In one process they live in
  the default registry. Several processes on one host (``serve`` plus ``switchboard worker``
  processes, or several ``serve``) share them through ``PROMETHEUS_MULTIPROC_DIR``: every
  process writes its samples to files there and ``/metrics`` sums them (the client's
  multi-process mode, https://prometheus.github.io/client_python/multiprocess/). Processes on
  other hosts are scraped on their own, or share the folder on a volume.
- **State** read from the database at scrape time (todos by state, claims, dead letters,
  waiting inbox items), so every process answers the same whatever did the work; attached
  agent sessions are this process's own.

Names follow https://prometheus.io/docs/practices/naming/: ``switchboard_`` prefix, ``_total``
for counters, ``_seconds`` for durations.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from switchboard.hub import Hub

OUTCOMES = ("accepted", "duplicate", "unverified", "too_large", "malformed", "quarantined", "rejected")
"""Delivery outcomes counted by ``switchboard_deliveries_total`` (issue 14)."""

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Sample files are named by process; containers sharing the folder on a volume all have
    # small pids (often 1), so the host name goes into the name too.
    import socket

    from prometheus_client import values as _values

    _HOST = socket.gethostname().replace("_", "-")[:60]
    _values.ValueClass = _values.MultiProcessValue(process_identifier=lambda: f"{_HOST}-{os.getpid()}")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

DELIVERIES = Counter("switchboard_deliveries_total", "Webhook deliveries by provider and outcome.",
                     ["provider", "outcome"])
PROCESSING_SECONDS = Histogram("switchboard_processing_seconds",
                               "Time to process one stored delivery into todos and feed events.",
                               buckets=_LATENCY_BUCKETS)
WAKE_LATENCY_SECONDS = Histogram("switchboard_delivery_to_wake_seconds",
                                 "Time from receiving a delivery to publishing the wake for its todo.",
                                 buckets=_LATENCY_BUCKETS)
VAULT_FETCHES = Counter("switchboard_vault_fetches_total", "secret_fetch calls that returned a value.")

_forward: Callable[[str, tuple[Any, ...]], None] | None = None


def forward_to(send: Callable[[str, tuple[Any, ...]], None] | None) -> None:
    """Send processing's observations (:func:`delivery_outcome`, :func:`processing_observed`,
    :func:`wake_published`) to ``send(name, args)`` instead of counting them here: embedded
    mode's processing process (:mod:`switchboard.queue.child`) forwards them to ``serve``, whose
    ``/metrics`` shows them, and ``serve`` replays them with :func:`observe`."""
    global _forward
    _forward = send


_FORWARDED: dict[str, Callable[..., None]] = {}


def _forwardable(observe_here: Callable[..., None]) -> Callable[..., None]:
    """Processing's observations: sent to :func:`forward_to`'s ``send`` when one is set, else
    counted here. :func:`observe` replays them by name in the serving process."""

    def observation(*args: Any) -> None:
        if _forward is not None:
            _forward(observe_here.__name__, args)
        else:
            observe_here(*args)

    observation.__name__, observation.__doc__ = observe_here.__name__, observe_here.__doc__
    _FORWARDED[observe_here.__name__] = observe_here
    return observation


def observe(name: str, args: tuple[Any, ...]) -> None:
    """Count a forwarded observation (``name`` one of the three functions above).

    Raises:
        ValueError: ``name`` is not one of them.
    """
    if name not in _FORWARDED:
        raise ValueError(f"not a forwarded metric: {name!r}")
    _FORWARDED[name](*args)


_HTTP_REFUSALS = {401: "unverified", 413: "too_large", 400: "malformed"}



_DELIVERY_COUNTS: dict[tuple[str, str], Any] = {}
"""``DELIVERIES``' labelled children by ``(provider, outcome)``: ``labels()`` takes a lock and
builds a key each call (about 3 µs of the receiver's time on the event loop, issue 11); the
child it returns is the same object every time."""


@_forwardable
def delivery_outcome(provider: str, outcome: str) -> None:
    """Count one delivery with ``outcome`` (one of :data:`OUTCOMES`)."""
    child = _DELIVERY_COUNTS.get((provider, outcome))
    if child is None:
        child = _DELIVERY_COUNTS[(provider, outcome)] = DELIVERIES.labels(provider=provider, outcome=outcome)
    child.inc()


def delivery_refused(hub: Hub, source_id: str, status: int, reason: str) -> None:
    """Count a refused delivery (401, 413, 400) and remember it for ``source show``.

    Refused deliveries are not stored (DESIGN.md §5), so this is all that is left of them: a
    counter per provider and outcome, and a per-source tally flushed to the database by the
    maintenance pass (:mod:`switchboard.refusals`). Unknown sources (404) are not counted.

    Args:
        hub: the process hub (its refusal tally).
        source_id: the URL's source id.
        status: the HTTP status answered.
        reason: the error code answered (``signature_invalid``, ``payload_too_large``, ...).
    """
    outcome = _HTTP_REFUSALS.get(status)
    if outcome is None and reason != "source_unconfigured":
        return  # 404 unknown source, 503 database down: not a refusal by a source
    # No I/O: this runs on the event loop (issue 11). The guard and the receiver load a source
    # into the source cache before they can refuse one of its deliveries, so a refusal of a
    # source that exists always finds its provider there.
    provider = hub.source_cache.provider_of(source_id)
    if provider is None:
        return  # not a source this process knows (an unknown id is never tallied)
    if outcome is not None:
        delivery_outcome(provider, outcome)
    hub.refusals.note(source_id, reason, hub.clock.now())


@_forwardable
def processing_observed(seconds: float, count: int) -> None:
    """Observe ``count`` deliveries processed in one batch that took ``seconds`` (each waited
    for the whole batch) in ``switchboard_processing_seconds``."""
    for _ in range(count):
        PROCESSING_SECONDS.observe(seconds)


@_forwardable
def wake_published(received_at: datetime, now: datetime) -> None:
    """Observe delivery → wake time (``received_at`` and ``now`` are aware UTC datetimes)."""
    if received_at.tzinfo is None:
        received_at = received_at.replace(tzinfo=UTC)
    WAKE_LATENCY_SECONDS.observe(max(0.0, (now - received_at).total_seconds()))


def vault_fetched() -> None:
    """Count one successful ``secret_fetch``."""
    VAULT_FETCHES.inc()


class StateCollector(Collector):
    """Gauges read from the database at scrape time, plus this process's attached sessions."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def collect(self) -> Iterable[GaugeMetricFamily]:
        from sqlalchemy import func, select

        from switchboard.models import InboxItem, Todo, in_state

        with self.hub.db.read() as s:
            # One count per state from its partial index (migration 0015), done as the rest of
            # the total (an index-only count): no scan of the todos table, payloads and all.
            by_state = {state: s.execute(select(func.count()).select_from(Todo).where(
                in_state(Todo.state, state))).scalar_one() for state in ("pending", "claimed", "failed", "cancelled")}
            by_state["done"] = s.execute(select(func.count()).select_from(Todo)).scalar_one() - sum(by_state.values())
            dead = s.execute(select(func.count()).select_from(Todo).where(
                in_state(Todo.state, "failed"), Todo.next_retry_at.is_(None))).scalar_one()  # type: ignore[union-attr]
            waiting = s.execute(select(func.count()).select_from(InboxItem).where(
                InboxItem.status == "open")).scalar_one()
        todos = GaugeMetricFamily("switchboard_todos", "Todos by state.", labels=["state"])
        for state in ("pending", "claimed", "done", "failed", "cancelled"):
            todos.add_metric([state], int(by_state.get(state, 0)))
        yield todos
        yield GaugeMetricFamily("switchboard_claims", "Todos claimed now (open leases).",
                                value=int(by_state.get("claimed", 0)))
        yield GaugeMetricFamily("switchboard_dead_letters", "Dead-lettered todos (failed, no retry due).",
                                value=int(dead))
        yield GaugeMetricFamily("switchboard_inbox_waiting", "Inbox items waiting on a human.", value=int(waiting))
        yield GaugeMetricFamily("switchboard_attached_sessions",
                                "Agent sessions attached to this process's /api/v1/agent/stream.",
                                value=self.hub.streams.count())


def render(hub: Hub) -> tuple[bytes, str]:
    """The exposition text for ``/metrics``.

    Returns:
        ``(body, content type)``.
    """
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        for metric in (DELIVERIES, PROCESSING_SECONDS, WAKE_LATENCY_SECONDS, VAULT_FETCHES):
            registry.register(_Forward(metric))
    registry.register(StateCollector(hub))
    return generate_latest(registry), CONTENT_TYPE_LATEST


class _Forward(Collector):
    def __init__(self, metric: Any) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Any]:
        return self.metric.collect()


def token_ok(expected: str | None, authorization: str | None) -> bool:
    """Whether ``authorization`` carries the metrics bearer token (constant-time; DESIGN.md §5).

    Args:
        expected: ``SWITCHBOARD_METRICS_TOKEN``, or ``None`` for an open endpoint.
        authorization: the request's ``Authorization`` header.
    """
    if not expected:
        return True
    scheme, _, value = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), expected.encode())

