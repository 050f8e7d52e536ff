"""Operations routes: readiness and Prometheus metrics (issue 14).

| route | what |
|---|---|
| ``GET /api/v1/ready`` | 200 when the database answers, its schema is at head, Redis (when configured) answers and embedded mode's processing process (when it runs) is up (``checks.delivery_writer`` reports the delivery writer process, informational while it restarts, as serve writes deliveries itself meanwhile, and failing while it is stalled: a row unanswered for 15 s); else 503 problem details naming each failed check |
| ``GET /metrics`` | Prometheus exposition (:mod:`switchboard.metrics`); ``Authorization: Bearer <SWITCHBOARD_METRICS_TOKEN>`` when that is set |

``/api/v1/health`` (in :mod:`switchboard.web.asgi`, on the event loop) says only that the process answers:
a load balancer uses ``ready`` to take a host in or out, an orchestrator ``health`` to restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, jsonify, request

from switchboard import metrics
from switchboard.errors import Unauthenticated
from switchboard.web import rest_calls
from switchboard.web.problems import MEDIA_TYPE, problem_body

if TYPE_CHECKING:
    from switchboard.hub import Hub

bp = Blueprint("rest_ops", __name__)




def readiness(hub: Hub) -> dict[str, str]:
    """Each check's verdict: ``ok``, ``not configured`` or a short reason (no secrets, no URLs)."""
    import sqlalchemy as sa

    from switchboard.schema import current_revision, head_revision

    checks: dict[str, str] = {}
    try:
        with hub.db.read() as s:
            s.execute(sa.text("select 1"))
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, never raised: this route must answer
        checks["database"] = f"unreachable ({type(exc).__name__})"
    if checks["database"] == "ok":
        try:
            current, head = current_revision(hub.settings), head_revision()
            checks["migrations"] = "ok" if current == head else f"at {current}, head is {head}"
        except Exception as exc:  # noqa: BLE001
            checks["migrations"] = f"unknown ({type(exc).__name__})"
    else:
        checks["migrations"] = "unknown (database unreachable)"
    if hub.settings.redis_url:
        import redis

        try:
            client = redis.Redis.from_url(hub.settings.redis_url, socket_connect_timeout=2, socket_timeout=2)
            try:
                client.ping()
            finally:
                client.close()
            checks["redis"] = "ok"
        except redis.exceptions.RedisError as exc:
            checks["redis"] = f"unreachable ({type(exc).__name__})"
    else:
        checks["redis"] = "not configured"
    healthy = hub.dispatcher.healthy()  # embedded mode's processing process, if it runs
    checks["processing"] = "not configured" if healthy is None else (
        "ok" if healthy else "down (acknowledged deliveries wait; serve keeps restarting it)")
    # The delivery writer process (SWITCHBOARD_DELIVERY_WRITER=process): while it restarts serve
    # writes deliveries itself, so ingest is not down and readiness does not fail on it.
    checks["delivery_writer"] = {
        None: "not configured", "ok": "ok",
        "restarting": "ok (its process is restarting; serve writes deliveries itself meanwhile)",
        "stalled": "stalled (its process has not answered in time; deliveries get 503)",  # not ready
    }[hub.delivery_writer_state()]
    return checks


@bp.get("/api/v1/ready")
def ready() -> Any:
    """Readiness: database reachable, schema at head, Redis reachable when configured, the
    processing process up when there is one (``SWITCHBOARD_PROCESSING=process``).
    ---
    get:
      summary: Readiness (for load balancers)
      responses:
        200: {description: 'Ready: {"status": "ready", "checks": {...}}'}
        503: {content: {application/problem+json: {schema: Problem}}}
    """
    checks = readiness(rest_calls.hub())
    if all(v.startswith("ok") or v == "not configured" for v in checks.values()):
        return jsonify({"status": "ready", "checks": checks})
    failed = ", ".join(f"{k}: {v}" for k, v in checks.items() if not (v.startswith("ok") or v == "not configured"))
    body = {**problem_body(503, "not_ready", f"not ready: {failed}"), "checks": checks}
    resp = jsonify(body)
    resp.status_code, resp.mimetype = 503, MEDIA_TYPE
    return resp


@bp.get("/metrics")
def prometheus_metrics() -> Any:
    """Prometheus metrics (text exposition format).
    ---
    get:
      summary: Prometheus metrics
      description: Bearer SWITCHBOARD_METRICS_TOKEN when that is set.
      security: [{metrics: []}, {}]
      responses:
        200: {content: {text/plain: {schema: {type: string}}}}
        401: {content: {application/problem+json: {schema: Problem}}}
    """
    hub = rest_calls.hub()
    if not metrics.token_ok(hub.settings.metrics_token, request.headers.get("Authorization")):
        raise Unauthenticated("send Authorization: Bearer <SWITCHBOARD_METRICS_TOKEN>")
    body, content_type = metrics.render(hub)
    return Response(body, status=200, content_type=content_type)
