"""The ``switchboard`` command (click). Every admin command takes ``--json`` for scripts.

Errors print ``error <code>: <message>`` on stderr and exit 2 (bad input) or 1 (other);
``--json`` prints ``{"error": {"code", "message"}}`` instead.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from switchboard import __version__, directory
from switchboard.config import Settings
from switchboard.errors import ConfigError, InvalidArgument, SwitchboardError
from switchboard.sources import PROVIDERS


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)


def _hub_cli() -> Any:
    from switchboard.db import upgrade
    from switchboard.hub import Hub

    settings = _settings()
    upgrade(settings)
    return Hub(settings, role="cli")


def _emit(as_json: bool, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def admin(fn: Callable[..., tuple[dict[str, Any], str]]) -> Callable[..., None]:
    """Decorate a command that returns ``(data, text)``; adds ``--json`` and error rendering."""

    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    @wraps(fn)
    def wrapper(*args: Any, as_json: bool = False, **kwargs: Any) -> None:
        try:
            data, text = fn(*args, **kwargs)
        except SwitchboardError as exc:
            if as_json:
                click.echo(json.dumps({"error": {"code": exc.code, "message": exc.message}}))
            else:
                click.echo(f"error {exc.code}: {exc.message}", err=True)
            sys.exit(2 if exc.status < 500 else 1)
        _emit(as_json, data, text)

    return wrapper


@click.group()
@click.version_option(__version__, prog_name="switchboard")
def main() -> None:
    """Switchboard: verified webhooks in, durable todos and channel wakes out."""
    logging.basicConfig(level=os.environ.get("SWITCHBOARD_LOG_LEVEL", "WARNING").upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@admin
def init() -> tuple[dict[str, Any], str]:
    """Create the instance folder and apply database migrations."""
    hub = _hub_cli()
    s = hub.settings
    safe_url = s.database_url.split("@")[-1] if "@" in s.database_url else s.database_url
    return {"home": str(s.home), "database": safe_url}, f"initialised {safe_url}"


@main.group()
def human() -> None:
    """Humans: the people who own agents and projects."""


@human.command("add")
@click.argument("name")
@admin
def human_add(name: str) -> tuple[dict[str, Any], str]:
    """Add a human called NAME."""
    with _hub_cli().db.write() as s:
        h = directory.add_human(s, name)
        return {"id": h.id, "name": h.name}, f"human {h.name} ({h.id})"


@main.group()
def identity() -> None:
    """Identities: a human's accounts on providers, by stable id."""


@identity.command("link")
@click.option("--human", "human_name", required=True, help="The human's name.")
@click.option("--provider", required=True, help="One of: " + ", ".join(PROVIDERS) + ".")
@click.option("--external-id", required=True,
              help="The provider's stable user id: GitHub/Gitea/Forgejo sender.id, GitLab user.id, Slack user "
                   "id (U…), Discord user id, Teams aadObjectId, Mattermost user_id, Telegram from.id, "
                   "Standard Webhooks: the source id.")
@click.option("--workspace", default="",
              help="Provider tenant: Slack team id (T…), Mattermost team_id, GitLab/Gitea/Forgejo instance host "
                   "(gitlab.com, codeberg.org); empty for GitHub, Discord, Teams, Telegram.")
@click.option("--login", default=None, help="Display handle, for reading only.")
@admin
def identity_link(human_name: str, provider: str, external_id: str, workspace: str,
                  login: str | None) -> tuple[dict[str, Any], str]:
    """Link a provider account to a human."""
    with _hub_cli().db.write() as s:
        i = directory.link_identity(s, human_name, provider, external_id, workspace, login)
        return ({"id": i.id, "human": human_name, "provider": i.provider, "workspace": i.workspace,
                 "external_id": i.external_id},
                f"linked {provider} {(i.workspace + ':') if i.workspace else ''}{i.external_id} to {human_name}")


@main.group()
def project() -> None:
    """Projects: the unit of scope for sources, todos and grants."""


@project.command("add")
@click.argument("name")
@admin
def project_add(name: str) -> tuple[dict[str, Any], str]:
    """Add a project called NAME."""
    with _hub_cli().db.write() as s:
        p = directory.add_project(s, name)
        return {"id": p.id, "name": p.name}, f"project {p.name} ({p.id})"


@main.group()
def source() -> None:
    """Sources: inbound webhook endpoints."""


@source.command("add")
@click.option("--project", "project_name", required=True)
@click.option("--provider", required=True, help="One of: " + ", ".join(PROVIDERS) + ".")
@click.option("--secret", default=None,
              help="Secret or key: generated when omitted for github, gitea, forgejo, gitlab, telegram, "
                   "standard_webhooks; required for slack (signing secret), discord (public key, hex), "
                   "teams (security token, base64), mattermost (token).")
@click.option("--queue", default="default", show_default=True, help="Queue for the todos it makes.")
@admin
def source_add(project_name: str, provider: str, secret: str | None, queue: str) -> tuple[dict[str, Any], str]:
    """Add a source; prints its id, webhook URL and (once) its secret."""
    hub = _hub_cli()
    with hub.db.write() as s:
        src, value = directory.add_source(s, project_name, provider, secret, queue)
    url = f"{hub.settings.public_url}/hooks/{src.id}"
    generated = secret is None
    text = f"source {src.id}\nwebhook URL: {url}\n" + (f"secret (shown once): {value}\n" if generated else "")
    text += "content type: application/json (form-encoded also works)"
    data = {"id": src.id, "url": url, "provider": provider, "queue": queue}
    if generated:
        data["secret"] = value
    return data, text


@source.command("rotate-secret")
@click.argument("source_id")
@click.option("--keep-old-for", default="24h", show_default=True,
              help="How long the old secret stays valid (e.g. 30m, 24h, 7d; 0 ends it now).")
@click.option("--secret", default=None, help="The new secret or key; generated when the provider allows.")
@admin
def source_rotate_secret(source_id: str, keep_old_for: str, secret: str | None) -> tuple[dict[str, Any], str]:
    """Add a new secret to SOURCE_ID; the old one expires after --keep-old-for."""
    hub = _hub_cli()
    keep = directory.parse_duration(keep_old_for)
    with hub.db.write() as s:
        row, value = directory.rotate_secret(s, source_id, hub.clock.now(), keep, secret)
    until = hub.clock.now() + keep
    data: dict[str, Any] = {"id": source_id, "old_valid_until": until.isoformat()}
    text = f"source {source_id}: old secret valid until {until.isoformat()}"
    if secret is None:
        data["secret"] = value
        text += f"\nnew secret (shown once): {value}"
    return data, text


@source.command("trust")
@click.argument("source_id")
@click.option("--human", "human_name", default=None, help="The human to trust (or untrust with --remove).")
@click.option("--remove", is_flag=True, help="Remove the human from the list.")
@click.option("--default", "use_default", is_flag=True,
              help="Back to the default: every human with an identity who owns an agent granted on the project.")
@admin
def source_trust(source_id: str, human_name: str | None, remove: bool, use_default: bool) -> tuple[dict[str, Any], str]:
    """Set which humans' deliveries on SOURCE_ID may become work."""
    with _hub_cli().db.write() as s:
        if use_default:
            directory.clear_trusted(s, source_id)
            return {"id": source_id, "trusted_humans": None}, f"source {source_id}: default trust"
        if not human_name:
            raise InvalidArgument("pass --human NAME (or --default)")
        ids = directory.set_trusted(s, source_id, human_name, trusted=not remove)
    return {"id": source_id, "trusted_humans": ids}, f"source {source_id}: {len(ids)} trusted human(s)"


@main.group()
def quarantine() -> None:
    """Quarantined deliveries: unknown, bot or untrusted senders, waiting for a human."""


@quarantine.command("list")
@click.option("--project", "project_name", default=None)
@click.option("--limit", default=100, type=click.IntRange(1, 1000), show_default=True)
@admin
def quarantine_list(project_name: str | None, limit: int) -> tuple[dict[str, Any], str]:
    """List quarantined deliveries with the sender to link."""
    from switchboard.intake import quarantine as q

    with _hub_cli().db.read() as s:
        project_id = directory.project_by_name(s, project_name).id if project_name else None
        rows = q.list_quarantined(s, project_id, limit)
    lines = []
    for r in rows:
        who = r["sender"]
        sender = "no sender" if who is None else (
            f"{who['provider']} {(who['workspace'] + ':') if who['workspace'] else ''}{who['external_id']}"
            f"{' (' + who['login'] + ')' if who['login'] else ''}")
        lines.append(f"{r['id']}  {r['reason']}  {r['event']}  {sender}  {r['received_at']}")
    return {"deliveries": rows}, "\n".join(lines) or "nothing quarantined"


@quarantine.command("release")
@click.argument("delivery_id")
@click.option("--as", "as_human", default=None,
              help="A human who answers for a sender that is still not attributable (e.g. a bot).")
@admin
def quarantine_release(delivery_id: str, as_human: str | None) -> tuple[dict[str, Any], str]:
    """Process a quarantined delivery again, once, with the now-linked identity."""
    from switchboard.intake import quarantine as q
    from switchboard.queue.jobs import process_delivery

    hub = _hub_cli()
    with hub.db.write() as s:
        human_id = directory.human_by_name(s, as_human).id if as_human else None
        q.release(s, hub.clock, delivery_id, human_id)
    status = process_delivery(hub, delivery_id)
    with hub.db.read() as s:
        from switchboard.models import Delivery

        d = s.get(Delivery, delivery_id)
        todo_id = d.todo_id if d else None
    return ({"id": delivery_id, "status": status, "todo_id": todo_id},
            f"delivery {delivery_id}: {status}" + (f", todo {todo_id}" if todo_id else ""))


@quarantine.command("discard")
@click.argument("delivery_id")
@admin
def quarantine_discard(delivery_id: str) -> tuple[dict[str, Any], str]:
    """Discard a quarantined delivery (its body is dropped)."""
    from switchboard.intake import quarantine as q

    hub = _hub_cli()
    with hub.db.write() as s:
        q.discard(s, hub.clock, delivery_id)
    return {"id": delivery_id, "status": "discarded"}, f"delivery {delivery_id}: discarded"


@main.group()
def agent() -> None:
    """Agents: AI workers owned by a human."""


@agent.command("add")
@click.argument("name")
@click.option("--human", "human_name", required=True)
@admin
def agent_add(name: str, human_name: str) -> tuple[dict[str, Any], str]:
    """Add an agent called NAME owned by a human."""
    with _hub_cli().db.write() as s:
        a = directory.add_agent(s, name, human_name)
        return {"id": a.id, "name": a.name, "human": human_name}, f"agent {a.name} ({a.id})"


@main.group()
def token() -> None:
    """Agent tokens."""


@token.command("vend")
@click.argument("agent_name")
@admin
def token_vend(agent_name: str) -> tuple[dict[str, Any], str]:
    """Vend a token for AGENT_NAME (shown once; only its hash is stored)."""
    with _hub_cli().db.write() as s:
        value = directory.vend_token(s, agent_name)
    return {"agent": agent_name, "token": value}, value


@main.command("grant")
@click.argument("agent_name")
@click.argument("project_name")
@click.option("--role", type=click.Choice(list(directory.ROLES)), required=True)
@admin
def grant_cmd(agent_name: str, project_name: str, role: str) -> tuple[dict[str, Any], str]:
    """Grant AGENT_NAME a role on PROJECT_NAME."""
    with _hub_cli().db.write() as s:
        directory.grant(s, agent_name, project_name, role)
    return ({"agent": agent_name, "project": project_name, "role": role},
            f"{agent_name} may {role} on {project_name}")


@main.command()
@click.option("--host", default=None, help="Listen address (default SWITCHBOARD_HOST or 127.0.0.1).")
@click.option("--port", default=None, type=click.IntRange(0, 65535), help="Port (default SWITCHBOARD_PORT or 8080).")
def serve(host: str | None, port: int | None) -> None:
    """Run the hub: receiver, MCP at /mcp, agent streams, REST (uvicorn)."""
    import uvicorn

    from switchboard.web.asgi import create_app

    settings = _settings()
    changes: dict[str, Any] = {}
    if host is not None:
        changes["host"] = host
    if port is not None:
        changes["port"] = port
    if changes:
        settings = settings.with_overrides(**changes)
    app = create_app(settings)
    click.echo(f"switchboard {__version__} on http://{settings.host}:{settings.port} "
               f"({'postgresql' if not settings.is_sqlite else 'sqlite'}, "
               f"{'rq jobs' if settings.redis_url else 'inline jobs'})", err=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", lifespan="on")


@main.command()
@click.option("--url", required=True, help="The hub's base URL, e.g. http://127.0.0.1:8080")
def channel(url: str) -> None:
    """Run the stdio channel adapter for Claude Code (token from SWITCHBOARD_TOKEN)."""
    from switchboard.mcp_server.channel import run_channel

    tok = os.environ.get("SWITCHBOARD_TOKEN", "").strip()
    if not tok:
        click.echo("error unauthenticated: set SWITCHBOARD_TOKEN to the agent's token", err=True)
        sys.exit(2)
    run_channel(url, tok)


@main.command()
@click.option("--burst", is_flag=True, help="Process what is queued, then exit.")
def worker(burst: bool) -> None:
    """Run an rq worker for delivery processing (needs SWITCHBOARD_REDIS_URL)."""
    from switchboard.worker import run_worker

    settings = _settings()
    if not settings.redis_url:
        click.echo("error config_invalid: `switchboard worker` needs SWITCHBOARD_REDIS_URL; without it, "
                   "`serve` processes deliveries in its own thread", err=True)
        sys.exit(2)
    run_worker(settings, burst=burst)
