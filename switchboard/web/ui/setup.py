"""``/ui/sources`` and ``/ui/agents`` (issue 15, items 6-7).

Sources of owned projects: create one (with the provider's setup steps on the page), copy its
URL, rotate its secret with an overlap, see recent deliveries with their verdicts and how many
requests were refused, by reason (:mod:`switchboard.refusals`, the tallies ``source show``
prints: refused requests are never stored, DESIGN.md §5). Agents of the signed-in human: vend a token (shown
once, with a ``.mcp.json`` snippet carrying the real URL), revoke tokens, see grants and the
the live adapter sessions (every
process: sessions are rows refreshed by the stream's heartbeat). Secrets and tokens are rendered into the response of the
POST that made them, never flashed (the flash store is the cookie).
"""

from __future__ import annotations

import json
from typing import Any

from flask import flash, g, redirect, render_template, request, url_for
from sqlalchemy import func, select

from switchboard import admin, refusals
from switchboard.errors import NotFound
from switchboard.models import Agent, Delivery, Grant, Source, SourceSecret, Token
from switchboard.sources import PROVIDERS, adapter_for
from switchboard.web.ui.base import bp, hub, owned_project, write_session

RECENT_DELIVERIES = 10

# Where to paste the URL and the secret, per provider (the README's table, "Other providers").
SETUP_STEPS: dict[str, list[str]] = {
    "github": ["Repository → Settings → Webhooks → Add webhook.",
               "Payload URL: the webhook URL above. Content type: application/json.",
               "Secret: the secret above. Events: everything, or issues, pull requests, reviews, pushes…"],
    "gitea": ["Repository → Settings → Webhooks → Add webhook → Gitea.", "Target URL: the webhook URL above.",
              "Secret: the secret above."],
    "forgejo": ["Repository → Settings → Webhooks → Add webhook → Forgejo.", "Target URL: the webhook URL above.",
                "Secret: the secret above."],
    "gitlab": ["Project → Settings → Webhooks.", "URL: the webhook URL above.",
               "Secret token: the secret above (or create the source with GitLab's signing token whsec_…)."],
    "slack": [("App settings → Event Subscriptions → Request URL: the webhook URL above "
               "(Slack's url_verification is answered once verified)."),
              "Use the same URL for Slash Commands and Interactivity.",
              "The secret is the app's Basic Information → Signing Secret, entered when creating the source."],
    "discord": ["Developer Portal → General Information → Interactions Endpoint URL: the webhook URL above.",
                "The secret is the application's Public Key (64 hex), entered when creating the source."],
    "teams": ["Team → Manage team → Apps → Create an outgoing webhook → Callback URL: the webhook URL above.",
              "The secret is the security token Teams shows once (base64), entered when creating the source."],
    "mattermost": ["Integrations → Outgoing Webhooks → Add → Callback URLs: the webhook URL above.",
                   "The secret is the webhook's Token, entered when creating the source."],
    "telegram": ["Call https://api.telegram.org/bot<TOKEN>/setWebhook?url=<webhook URL>&secret_token=<secret>.",
                 "Use the webhook URL and the secret above."],
    "standard_webhooks": ["In the sender's endpoint settings, add the webhook URL above.",
                          "Secret: the whsec_… secret above (or create the source with the sender's own)."],
}


def _url(source_id: str) -> str:
    return f"{hub().settings.public_url}/hooks/{source_id}"


def _source(s: Any, source_id: str) -> Source:
    source = s.get(Source, source_id) if isinstance(source_id, str) else None
    if source is None or source.project_id not in g.owned:
        raise NotFound("no such source")
    return source  # type: ignore[no-any-return]


def _sources_view(s: Any) -> list[dict[str, Any]]:
    if not g.owned:
        return []
    now = hub().clock.now()
    sources = s.execute(select(Source).where(Source.project_id.in_(g.owned))  # type: ignore[attr-defined]
                        .order_by(Source.created_at)).scalars().all()
    out = []
    for src in sources:
        secrets = s.execute(select(SourceSecret.created_at, SourceSecret.expires_at)
                            .where(SourceSecret.source_id == src.id).order_by(SourceSecret.created_at)).all()
        counts = dict(s.execute(select(Delivery.status, func.count()).where(Delivery.source_id == src.id)
                                .group_by(Delivery.status)).all())
        recent = s.execute(select(Delivery).where(Delivery.source_id == src.id)
                           .order_by(Delivery.received_at.desc()).limit(RECENT_DELIVERIES)).scalars().all()  # type: ignore[attr-defined]
        out.append({
            "id": src.id, "provider": src.provider, "project": g.projects.get(src.project_id), "queue": src.queue,
            "enabled": src.enabled, "url": _url(src.id),
            "todo_events": "default" if src.todo_events is None else (", ".join(src.todo_events) or "none"),
            "secrets": [{"created_at": c, "expires_at": e, "valid": e is None or e > now} for c, e in secrets],
            "counts": counts, "refused": refusals.for_source(s, src.id),
            "recent": [{"id": d.id, "status": d.status, "event": d.event, "received_at": d.received_at,
                        "reason": d.quarantine_reason or d.error_code} for d in recent],
        })
    return out


@bp.get("/sources")
def sources_page() -> Any:
    """Sources of owned projects and the form to add one."""
    with hub().db.read() as s:
        rows = _sources_view(s)
    return render_template("ui/sources.html", sources=rows, providers=PROVIDERS, page="sources")


@bp.post("/sources")
def source_add() -> Any:
    """Create a source; the page shows its URL, its secret once, and the provider's steps."""
    provider = request.form.get("provider") or ""
    adapter_for(provider)  # InvalidArgument for an unknown provider, before anything else
    secret = (request.form.get("secret") or "").strip() or None
    with write_session() as s:
        pid = owned_project(s, request.form.get("project"))
        source, value = admin.add_source(s, g.projects[pid], provider, secret,
                                             (request.form.get("queue") or "default").strip())
    return render_template("ui/source_created.html", source_id=source.id, url=_url(source.id), provider=provider,
                           secret=value if secret is None else None, steps=SETUP_STEPS.get(provider, []),
                           page="sources")


@bp.post("/sources/<source_id>/rotate")
def source_rotate(source_id: str) -> Any:
    """Add a new secret; the current ones stay valid for ``keep_old_for`` (default 24h)."""
    keep = admin.parse_duration(request.form.get("keep_old_for") or "24h")
    secret = (request.form.get("secret") or "").strip() or None
    with write_session() as s:
        source = _source(s, source_id)
        _, value = admin.rotate_secret(s, source.id, hub().clock.now(), keep, secret)
        provider = source.provider
    return render_template("ui/source_created.html", source_id=source_id, url=_url(source_id), provider=provider,
                           secret=value if secret is None else None, steps=SETUP_STEPS.get(provider, []),
                           rotated_until=hub().clock.now() + keep, page="sources")


@bp.post("/sources/<source_id>/todo-events")
def source_todo_events(source_id: str) -> Any:
    """Which event kinds of the source become todos (``source set --todo-events``): comma-separated
    kinds, ``default`` or ``none``."""
    with write_session() as s:
        _source(s, source_id)
        admin.set_todo_events(s, source_id, request.form.get("todo_events") or "")
    flash(f"Todo events of {source_id} set")
    return redirect(url_for("ui.sources_page"), code=303)


# --- agents -------------------------------------------------------------------------------------

def _agent(s: Any, name: str) -> Agent:
    agent = s.execute(select(Agent).where(Agent.name == name)).scalars().first()
    if agent is None or agent.human_id != g.human.id:
        raise NotFound("no such agent")
    return agent  # type: ignore[no-any-return]


def mcp_snippet(url: str, token: str) -> str:
    """The ``.mcp.json`` that points Claude Code's channel adapter at this hub (README): the
    ``switchboard`` beside this server's interpreter when there is one, the public URL."""
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("switchboard")
    return json.dumps({"mcpServers": {"switchboard": {
        "command": str(exe) if exe.exists() else "switchboard", "args": ["channel", "--url", url], "env": {"SWITCHBOARD_TOKEN": token}}}},
        indent=2, ensure_ascii=False)


@bp.get("/agents")
def agents_page() -> Any:
    """The signed-in human's agents: grants, live tokens, the live adapter sessions (every
process: sessions are rows refreshed by the stream's heartbeat)."""
    from switchboard.models import Project
    from switchboard.notify.sessions import live_sessions

    with hub().db.read() as s:
        agents = s.execute(select(Agent).where(Agent.human_id == g.human.id).order_by(Agent.name)).scalars().all()
        rows = []
        for a in agents:
            grants = s.execute(select(Project.name, Grant.role).join(Project, Project.id == Grant.project_id)
                               .where(Grant.agent_id == a.id).order_by(Project.name)).all()
            tokens = s.execute(select(Token.id, Token.created_at).where(
                Token.agent_id == a.id, Token.revoked_at.is_(None)).order_by(Token.created_at)).all()  # type: ignore[union-attr]
            rows.append({"name": a.name, "id": a.id, "grants": grants, "tokens": tokens,
                         "sessions": live_sessions(s, hub().clock, a.id)})
    return render_template("ui/agents.html", agents=rows, page="agents",
                           snippet=mcp_snippet(hub().settings.public_url, "sbk_…"))


@bp.post("/agents/<name>/tokens")
def agent_vend(name: str) -> Any:
    """Vend a token (shown once on this page, with the ``.mcp.json`` snippet)."""
    with write_session() as s:
        _agent(s, name)
        token = admin.vend_token(s, name)
    return render_template("ui/token.html", agent=name, token=token,
                           snippet=mcp_snippet(hub().settings.public_url, token), page="agents")


@bp.post("/agents/<name>/doorbell")
def agent_doorbell(name: str) -> Any:
    """Ring the agent's doorbell (the ``doorbell_test`` tool's function, as ``switchboard doctor``
    does) and show the verdict page."""
    from switchboard.notify import doorbell

    with write_session() as s:
        agent = _agent(s, name)
        rung = doorbell.ring(s, hub().clock, agent.id)
    for session_id in rung.pop("targets"):
        hub().broker.publish_event(agent.id, session_id)
    return redirect(url_for("ui.agent_doorbell_verdict", name=name, ring_id=rung["ring_id"]), code=303)


@bp.get("/agents/<name>/doorbell/<ring_id>")
def agent_doorbell_verdict(name: str, ring_id: str) -> Any:
    """``heard``, ``unheard`` or ``no_session`` for one ring, with the fix; the page reloads
    itself (a meta refresh, no script) while the ring is unheard, for up to a minute."""
    from switchboard.models import AgentEvent
    from switchboard.notify import doorbell

    with hub().db.read() as s:
        agent = _agent(s, name)
        rings = s.execute(select(AgentEvent).where(AgentEvent.agent_id == agent.id,
                                                   AgentEvent.kind == "doorbell_ring")
                          .order_by(AgentEvent.id.desc()).limit(200)).scalars().all()  # type: ignore[union-attr]
        ring = next((r for r in rings if (r.data or {}).get("ring_id") == ring_id), None)
        if ring is None:
            raise NotFound("no such doorbell ring")
        verdict = doorbell.verdict(s, agent.id, ring_id)
    waiting = verdict == "unheard" and (hub().clock.now() - ring.created_at).total_seconds() < 60
    return render_template("ui/doorbell.html", agent=name, ring_id=ring_id, verdict=verdict, waiting=waiting,
                           sessions=(ring.data or {}).get("sessions", 0), fix=doorbell.VERDICTS[verdict],
                           page="agents")


@bp.post("/agents/<name>/tokens/<token_id>/revoke")
def agent_revoke(name: str, token_id: str) -> Any:
    """Revoke one of the agent's tokens: its next call is ``unauthenticated``."""
    with write_session() as s:
        agent = _agent(s, name)
        token = s.get(Token, token_id)
        if token is None or token.agent_id != agent.id or token.revoked_at is not None:
            raise NotFound("no such token")
        token.revoked_at = hub().clock.now()
    flash(f"Revoked token {token_id} of {name}")
    return redirect(url_for("ui.agents_page"), code=303)


