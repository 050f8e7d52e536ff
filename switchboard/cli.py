"""The ``switchboard`` command (click). Every admin command takes ``--json`` for scripts.

Errors print ``error <code>: <message>`` on stderr and exit 2 (bad input) or 1 (other);
``--json`` prints ``{"error": {"code", "message"}}`` instead.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

import click

from switchboard import __version__, directory
from switchboard.config import LOG_LEVELS, Settings
from switchboard.errors import ConfigError, InvalidArgument, SwitchboardError
from switchboard.sources import PROVIDERS


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        click.echo(f"error config_invalid: {exc}", err=True)
        sys.exit(2)


def _redacted_url(url: str) -> str:
    """A database or Redis URL without its password."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


@contextmanager
def clear_errors(as_json: bool = False) -> Iterator[None]:
    """Turn expected failures into one line ``error <code>: <message>`` and an exit code.

    Exit 2 for bad input or configuration, 1 for an unreachable service or internal error.
    """
    import redis
    from sqlalchemy.exc import DBAPIError

    def fail(code: str, message: str, status: int) -> None:
        if as_json:
            click.echo(json.dumps({"error": {"code": code, "message": message}}))
        else:
            click.echo(f"error {code}: {message}", err=True)
        sys.exit(status)

    try:
        yield
    except SwitchboardError as exc:
        fail(exc.code, exc.message, 2 if exc.status < 500 else 1)
    except DBAPIError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        fail("dependency_unavailable", f"the database failed: {first[:300]}", 1)
    except redis.exceptions.RedisError as exc:
        fail("dependency_unavailable", f"cannot use Redis ({type(exc).__name__}: {str(exc)[:200]})", 1)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        fail("config_invalid", f"{exc.strerror or type(exc).__name__}{where}", 2)


def _hub_cli(migrate: bool = False) -> Any:
    """The CLI's hub. Only ``init`` and ``migrate`` upgrade the schema; every other command runs
    the cheap at-head check (:mod:`switchboard.schema`) and stops with exit 2 when no instance
    exists or the schema is behind."""
    from switchboard.hub import Hub

    settings = _settings()
    if migrate:
        from switchboard.db import upgrade

        upgrade(settings)
    else:
        from switchboard.schema import require_at_head

        require_at_head(settings)
    return Hub(settings, role="cli")


def _emit(as_json: bool, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def admin(fn: Callable[..., tuple[dict[str, Any], str]]) -> Callable[..., None]:
    """Decorate a command that returns ``(data, text)``; adds ``--json`` and error rendering."""

    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    @wraps(fn)
    def wrapper(*args: Any, as_json: bool = False, **kwargs: Any) -> None:
        with clear_errors(as_json):
            data, text = fn(*args, **kwargs)
        _emit(as_json, data, text)

    return wrapper


_CURSOR_OPTION = click.option(
    "--cursor", default=None, help="next_cursor of an earlier page (printed at its end): the page after it.")


def _more(text: str, page: dict[str, Any]) -> str:
    """``text`` with a last line naming the cursor of the next page, when there is one (issue 18 item 4)."""
    if page.get("next_cursor"):
        return f"{text}\n(more: --cursor {page['next_cursor']})"
    return text


@click.group()
@click.version_option(__version__, prog_name="switchboard")
def main() -> None:
    """Switchboard: verified webhooks in, durable todos and channel wakes out."""
    from switchboard import logs

    level = os.environ.get("SWITCHBOARD_LOG_LEVEL", "WARNING").strip().upper() or "WARNING"
    fmt = os.environ.get("SWITCHBOARD_LOG_FORMAT", "").strip().lower() or "text"
    logs.configure(level if level in LOG_LEVELS else "WARNING", fmt if fmt in ("text", "json") else "text")
    from switchboard.log_redaction import install

    install()  # no payloads or credentials in any log (issue 13 item 6)
    if level not in LOG_LEVELS:
        _settings()  # lists every invalid setting and exits 2


@main.command()
@admin
def init() -> tuple[dict[str, Any], str]:
    """Create the instance folder and apply database migrations."""
    hub = _hub_cli(migrate=True)
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


@human.command("token")
@click.argument("name")
@admin
def human_token(name: str) -> tuple[dict[str, Any], str]:
    """Vend an API token for the human NAME (for /api/v1/human; shown once)."""
    with _hub_cli().db.write() as s:
        value = directory.vend_human_token(s, name)
    return {"human": name, "token": value}, value


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
@click.option("--owner", "owners", multiple=True, help="A human who owns it (repeatable).")
@admin
def project_add(name: str, owners: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """Add a project called NAME."""
    with _hub_cli().db.write() as s:
        p = directory.add_project(s, name)
        for owner in owners:
            directory.add_owner(s, name, owner)
        return {"id": p.id, "name": p.name, "owners": list(owners)}, f"project {p.name} ({p.id})"


@project.command("owner")
@click.argument("project_name")
@click.argument("human_name")
@admin
def project_owner(project_name: str, human_name: str) -> tuple[dict[str, Any], str]:
    """Make HUMAN_NAME an owner of PROJECT_NAME."""
    with _hub_cli().db.write() as s:
        directory.add_owner(s, project_name, human_name)
    return {"project": project_name, "owner": human_name}, f"{human_name} owns {project_name}"


TODO_EVENTS_HELP = ("Comma-separated event kinds that become todos (e.g. issues,pull_request,"
                    "pull_request_review_comment or event_callback.app_mention); a kind matches itself and "
                    "its '.action' variants; 'default' for the provider's list, 'none' for feed events only.")


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
@click.option("--allow-legacy-sha1", is_flag=True,
              help="GitHub only: also accept the legacy X-Hub-Signature (SHA-1) when no SHA-256 header is sent.")
@click.option("--todo-events", default=None, help=TODO_EVENTS_HELP)
@admin
def source_add(project_name: str, provider: str, secret: str | None, queue: str,
               allow_legacy_sha1: bool, todo_events: str | None) -> tuple[dict[str, Any], str]:
    """Add a source; prints its id, webhook URL and (once) its secret."""
    if allow_legacy_sha1 and provider != "github":
        raise InvalidArgument("--allow-legacy-sha1 applies to GitHub sources only")
    hub = _hub_cli()
    with hub.db.write() as s:
        src, value = directory.add_source(s, project_name, provider, secret, queue)
        src.allow_legacy_sha1 = allow_legacy_sha1
        if todo_events is not None:
            directory.set_todo_events(s, src.id, todo_events)
    url = f"{hub.settings.public_url}/hooks/{src.id}"
    generated = secret is None
    text = f"source {src.id}\nwebhook URL: {url}\n" + (f"secret (shown once): {value}\n" if generated else "")
    if provider in ("github", "gitea", "forgejo", "mattermost"):
        text += "content type: application/json (form-encoded also works)"
    else:
        text += "content type: as the provider sends it"
    data = {"id": src.id, "url": url, "provider": provider, "queue": queue}
    if generated:
        data["secret"] = value
    return data, text


@source.command("set")
@click.argument("source_id")
@click.option("--todo-events", default=None, help=TODO_EVENTS_HELP)
@admin
def source_set(source_id: str, todo_events: str | None) -> tuple[dict[str, Any], str]:
    """Change settings of SOURCE_ID (which event kinds become todos)."""
    from switchboard.sources import routing

    if todo_events is None:
        raise InvalidArgument("nothing to set: pass --todo-events")
    with _hub_cli().db.write() as s:
        stored = directory.set_todo_events(s, source_id, todo_events)
        provider = directory.source_by_id(s, source_id).provider
    shown = routing.effective(provider, stored)
    data = {"id": source_id, "todo_events": shown, "todo_events_default": stored is None}
    return data, (f"source {source_id}: todos from {', '.join(shown) or 'no events'}"
                  f"{' (default)' if stored is None else ''}")


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
@_CURSOR_OPTION
@admin
def quarantine_list(project_name: str | None, limit: int, cursor: str | None) -> tuple[dict[str, Any], str]:
    """List quarantined deliveries with the sender to link, oldest first (one page)."""
    from switchboard.intake import quarantine as q

    with _hub_cli().db.read() as s:
        project_id = directory.project_by_name(s, project_name).id if project_name else None
        page = q.page_quarantined(s, None if project_id is None else [project_id], limit=limit, cursor=cursor)
    rows = page["deliveries"]
    lines = []
    for r in rows:
        who = r["sender"]
        sender = "no sender" if who is None else (
            f"{who['provider']} {(who['workspace'] + ':') if who['workspace'] else ''}{who['external_id']}"
            f"{' (' + who['login'] + ')' if who['login'] else ''}")
        reason = r["reason"] if r.get("reason_now") == r["reason"] else (
            f"{r['reason']} (now {r['reason_now']})" if r.get("reason_now")
            else f"{r['reason']} (sender now linked and trusted: release it)")
        lines.append(f"{r['id']}  {reason}  {r['event']}  {sender}  {r['received_at']}")
    return page, _more("\n".join(lines) or "nothing quarantined", page)


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


@source.command("list")
@admin
def source_list() -> tuple[dict[str, Any], str]:
    """List sources with their project, provider, queue and webhook URL."""
    from sqlalchemy import select

    from switchboard.models import Project, Source
    from switchboard.sources import routing

    hub = _hub_cli()
    with hub.db.read() as s:
        rows = s.execute(select(Source, Project.name).join(Project, Project.id == Source.project_id)
                         .order_by(Source.created_at)).all()
    data = [{"id": src.id, "project": name, "provider": src.provider, "queue": src.queue, "enabled": src.enabled,
             "url": f"{hub.settings.public_url}/hooks/{src.id}",
             "todo_events": routing.effective(src.provider, src.todo_events),
             "todo_events_default": src.todo_events is None} for src, name in rows]
    text = "\n".join(f"{d['id']} {d['provider']} -> {d['project']}/{d['queue']}  {d['url']}\n"
                     f"    todo events{' (default)' if d['todo_events_default'] else ''}: "
                     f"{', '.join(d['todo_events']) or 'none'}" for d in data)
    return {"sources": data}, text or "no sources"


@main.group()
def delivery() -> None:
    """Deliveries: what each source received, and the verdict."""


@delivery.command("list")
@click.option("--status", type=click.Choice(["received", "processed", "quarantined", "rejected", "failed"]),
              default=None)
@click.option("--source", "source_id", default=None)
@click.option("--limit", default=50, type=click.IntRange(1, 1000), show_default=True)
@_CURSOR_OPTION
@admin
def delivery_list(status: str | None, source_id: str | None, limit: int,
                  cursor: str | None) -> tuple[dict[str, Any], str]:
    """List deliveries, newest first (no bodies), one page; --cursor continues to older ones.

    Keyset paging on (received_at, id) descending (:mod:`switchboard.paging`): deliveries that
    arrive between pages go before the first page and never shift the ones after the cursor.
    """
    from sqlalchemy import select

    from switchboard import paging
    from switchboard.models import Delivery

    hub = _hub_cli()
    key = ("time", "str")
    query = select(Delivery)
    if cursor is not None:
        query = query.where(paging.after((Delivery.received_at, Delivery.id),
                                         paging.decode(cursor, "deliveries", key), descending=True))
    if status:
        query = query.where(Delivery.status == status)
    if source_id:
        query = query.where(Delivery.source_id == source_id)
    query = query.order_by(Delivery.received_at.desc(), Delivery.id.desc()).limit(limit + 1)  # type: ignore[attr-defined,union-attr]
    with hub.db.read() as s:
        rows, next_cursor = paging.page(s.execute(query).scalars().all(), limit, "deliveries", key,
                                        lambda d: (d.received_at, d.id))
    data = [{"id": d.id, "source_id": d.source_id, "status": d.status, "event": d.event,
             "received_at": d.received_at.isoformat(), "todo_id": d.todo_id,
             "reason": d.quarantine_reason or d.error_code, "detail": d.error_detail} for d in rows]
    text = "\n".join(f"{d['id']} {d['received_at'][:19]} {d['status']:<11} {d['event'] or '-'}"
                     + (f" -> {d['todo_id']}" if d["todo_id"] else "")
                     + (f" ({d['reason']}{': ' + d['detail'] if d['detail'] else ''})" if d["reason"] else "")
                     for d in data)
    page = {"deliveries": data, "has_more": next_cursor is not None, "next_cursor": next_cursor}
    return page, _more(text or "no deliveries", page)


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


@agent.command("list")
@admin
def agent_list() -> tuple[dict[str, Any], str]:
    """List agents with their human and grants."""
    from sqlalchemy import select

    from switchboard.models import Agent, Grant, Human, Project

    hub = _hub_cli()
    with hub.db.read() as s:
        agents = s.execute(select(Agent, Human.name).join(Human, Human.id == Agent.human_id)
                           .order_by(Agent.name)).all()
        grants = s.execute(select(Grant.agent_id, Project.name, Grant.role)
                           .join(Project, Project.id == Grant.project_id)).all()
    data = [{"id": a.id, "name": a.name, "human": human,
             "grants": [{"project": p, "role": r} for aid, p, r in grants if aid == a.id]} for a, human in agents]
    text = "\n".join(f"{d['name']} ({d['human']}): " + (", ".join(f"{g['project']}={g['role']}" for g in d["grants"])
                                                          or "no grants") for d in data)
    return {"agents": data}, text or "no agents"


@main.group()
def token() -> None:
    """Agent and human API tokens.

    Agent tokens (sbk_) are for /mcp, the channel adapter and the agent REST; human tokens
    (sbh_) for /api/v1/human. Each is shown once; only its hash is stored.
    """


@token.command("vend")
@click.argument("agent_name")
@admin
def token_vend(agent_name: str) -> tuple[dict[str, Any], str]:
    """Vend a token for AGENT_NAME (shown once; only its hash is stored)."""
    with _hub_cli().db.write() as s:
        value = directory.vend_token(s, agent_name)
    return {"agent": agent_name, "token": value}, value


@token.command("vend-human")
@click.argument("human_name")
@admin
def token_vend_human(human_name: str) -> tuple[dict[str, Any], str]:
    """Vend an API token for HUMAN_NAME (shown once): answers and decides inbox items over REST."""
    with _hub_cli().db.write() as s:
        value = directory.vend_human_token(s, human_name)
    return {"human": human_name, "token": value}, value


@main.command("login")
@click.argument("human_name")
@admin
def login_cmd(human_name: str) -> tuple[dict[str, Any], str]:
    """Print a one-time web UI login link for HUMAN_NAME (single use, valid 10 minutes)."""
    from switchboard.web import logins

    hub = _hub_cli()
    with hub.db.write() as s:
        token = logins.create_link(s, hub.clock, human_name)
    url = logins.link_url(hub.settings, token)
    return ({"human": human_name, "url": url, "expires_in_seconds": logins.LOGIN_LINK_SECONDS},
            f"{url}\n(one-time link for {human_name}: open it within 10 minutes)")


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


@main.group()
def todo() -> None:
    """Todos: add work by hand, assign it, and handle dead letters (the human side)."""


@todo.command("add")
@click.option("--project", "project_name", required=True)
@click.option("--title", required=True, help="One line: what needs doing.")
@click.option("--queue", default="default", show_default=True)
@click.option("--assign", "agent_name", default=None, help="Only this agent may claim it (and is woken).")
@click.option("--priority", default=0, type=click.IntRange(-1000, 1000), show_default=True)
@click.option("--max-attempts", default=5, type=click.IntRange(1, 100), show_default=True)
@admin
def todo_add(project_name: str, title: str, queue: str, agent_name: str | None, priority: int,
             max_attempts: int) -> tuple[dict[str, Any], str]:
    """Add a todo by hand; the hub wakes an eligible agent within seconds."""
    from switchboard.intake.channel_break import breaks_channel
    from switchboard.queue import todos as todo_ops
    from switchboard.sources.github import one_line
    from switchboard.errors import InvalidArgument

    hub = _hub_cli()
    line = one_line(title)
    if not line or breaks_channel(line):
        raise InvalidArgument("the title must be one non-empty line without a <channel> tag")
    directory.check_name("queue", queue)
    with hub.db.write() as s:
        project_row = directory.project_by_name(s, project_name)
        agent_id = directory.assignable_agent(s, agent_name, project_row.id).id if agent_name else None
        row_, _ = todo_ops.create(s, hub.clock, project_id=project_row.id, queue=queue, kind="manual",
                                  title=line, payload=None)
        row_.priority, row_.max_attempts, row_.assigned_agent_id = priority, max_attempts, agent_id
        data = todo_ops.row(row_)
    data["assigned_agent"] = agent_name
    return data, f"todo {data['id']} on {queue}: {line}" + (
        f"\nassigned to {agent_name}: only it may claim it, and it is woken" if agent_name else "")


@todo.command("list")
@click.option("--project", "project_name", default=None)
@click.option("--state", type=click.Choice(["pending", "claimed", "done", "failed", "cancelled"]), default=None)
@click.option("--dead-letters", is_flag=True, help="Only dead-lettered todos.")
@click.option("--limit", default=50, type=click.IntRange(1, 1000), show_default=True)
@_CURSOR_OPTION
@admin
def todo_list_cmd(project_name: str | None, state: str | None, dead_letters: bool,
                  limit: int, cursor: str | None) -> tuple[dict[str, Any], str]:
    """List todos (oldest first), or only the dead letters, one page; --cursor continues."""
    from switchboard.queue import todos as todo_ops

    hub = _hub_cli()
    with hub.db.read() as s:
        project_id = directory.project_by_name(s, project_name).id if project_name else None
        page = todo_ops.page_of(s, None if project_id is None else [project_id], state=state,
                                dead_letters=dead_letters, limit=limit, cursor=cursor, max_limit=1000)
        rows = page["todos"]
        _name_assignees(s, rows)
    text = "\n".join(f"{r['id']} [{r['state']}{' dead' if r['dead_lettered'] else ''}] {r['queue']}: {r['title']}"
                     + (f" (assigned to {r['assigned_agent']})" if r.get("assigned_agent") else "")
                     for r in rows) or "no todos"
    return page, _more(text, page)


@todo.command("show")
@click.argument("todo_id")
@admin
def todo_show(todo_id: str) -> tuple[dict[str, Any], str]:
    """A todo with its payload and attempts."""
    from switchboard.errors import NotFound
    from switchboard.models import Todo
    from switchboard.queue import todos as todo_ops

    hub = _hub_cli()
    with hub.db.read() as s:
        row_ = s.get(Todo, todo_id)
        if row_ is None:
            raise NotFound("no such todo")
        data = todo_ops.row(row_, with_payload=True)
        data["attempts"] = todo_ops.attempts_of(s, todo_id)
        _name_assignees(s, [data])
    lines = [f"{data['id']} [{data['state']}] {data['queue']}: {data['title']}"]
    if data.get("assigned_agent"):
        lines.append(f"assigned to: {data['assigned_agent']}")
    if data["ring_count"]:
        lines.append(f"rung {data['ring_count']} time(s), last at {data['last_rung_at']}"
                     + (" (never claimed)" if not data["attempts"] else ""))
    if data.get("payload") is not None:
        lines.append("payload: " + json.dumps(data["payload"], indent=2, default=str))
    if data.get("result") is not None:
        lines.append("result: " + json.dumps(data["result"], default=str))
    lines += [f"  attempt {a['number']} by {a['agent_id']} at {a['claimed_at']}: {a['outcome'] or 'open'}"
              + (f" ({a['summary']})" if a["summary"] else "") for a in data["attempts"]]
    return data, "\n".join(lines)


def _name_assignees(session: Any, rows: list[dict[str, Any]]) -> None:
    """Add ``assigned_agent`` (the agent's name, or ``None``) to each todo row."""
    from sqlalchemy import select

    from switchboard.models import Agent

    ids = {r["assigned_agent_id"] for r in rows if r.get("assigned_agent_id")}
    names = dict(session.execute(select(Agent.id, Agent.name).where(Agent.id.in_(ids))).all()) if ids else {}
    for r in rows:
        r["assigned_agent"] = names.get(r.get("assigned_agent_id") or "")


@todo.command("assign")
@click.argument("todo_id")
@click.argument("agent_name")
@admin
def todo_assign(todo_id: str, agent_name: str) -> tuple[dict[str, Any], str]:
    """Assign a pending todo to AGENT_NAME: only it may claim it, and it is woken."""
    from switchboard.queue import todos as todo_ops

    hub = _hub_cli()
    with hub.db.write() as s:
        from switchboard.errors import NotFound
        from switchboard.models import Todo

        todo_row = s.get(Todo, todo_id)
        if todo_row is None:
            raise NotFound("no such todo")
        agent_row = directory.assignable_agent(s, agent_name, todo_row.project_id)
        row_ = todo_ops.assign(s, hub.clock, todo_id, agent_row.id)
        row_.rung_at, row_.ring_count = None, 0  # ring the assignee on the hub's next pass
        data = todo_ops.row(row_)
    return data, f"{todo_id} assigned to {agent_name}"


@todo.command("retry")
@click.argument("todo_id")
@admin
def todo_retry(todo_id: str) -> tuple[dict[str, Any], str]:
    """Send a dead-lettered todo back to pending with a fresh attempt budget."""
    from switchboard.queue import todos as todo_ops

    hub = _hub_cli()
    with hub.db.write() as s:
        data = todo_ops.retry_dead_letter(s, hub.clock, todo_id)
    return data, f"{todo_id} is pending again"


@todo.command("cancel")
@click.argument("todo_id")
@admin
def todo_cancel(todo_id: str) -> tuple[dict[str, Any], str]:
    """Withdraw a todo (a holder's later complete or fail is refused)."""
    from switchboard.queue import todos as todo_ops

    hub = _hub_cli()
    with hub.db.write() as s:
        data = todo_ops.cancel(s, hub.clock, todo_id)
    return data, f"{todo_id} cancelled"


@main.group()
def inbox() -> None:
    """Questions and approvals from agents: list them, answer, decide (the human side)."""


@inbox.command("list")
@click.option("--human", "human_name", default=None, help="Only items waiting on this human.")
@click.option("--status", type=click.Choice(["open", "answered", "decided", "expired", "all"]), default="open",
              show_default=True)
@click.option("--limit", default=100, type=click.IntRange(1, 1000), show_default=True)
@_CURSOR_OPTION
@admin
def inbox_list(human_name: str | None, status: str, limit: int, cursor: str | None) -> tuple[dict[str, Any], str]:
    """List inbox items, oldest first, one page; --cursor continues."""
    from switchboard.inbox import items as inbox_ops

    hub = _hub_cli()
    with hub.db.read() as s:
        human_id = directory.human_by_name(s, human_name).id if human_name else None
        page = inbox_ops.page_for_human(s, human_id=human_id, status=None if status == "all" else status,
                                        limit=limit, cursor=cursor)
    rows = page["items"]
    lines = []
    for r in rows:
        extra = f" options: {', '.join(r['options'])}" if r["options"] else ""
        if r["kind"] == "permission":
            extra = f" (reply `yes {r['request_id']}` or `no {r['request_id']}`): {r['body'] or ''}"
        result = f" -> {r['answer'] or r['decision']}" if r["status"] != "open" and (r["answer"] or r["decision"]) else ""
        lines.append(f"{r['id']} [{r['kind']} {r['status']}] {r['project'] or '-'} from {r['agent']} to {r['human']}: "
                     f"{r['title']}{extra}{result}")
    return page, _more("\n".join(lines) or "no inbox items", page)


def _resolve_as(item_id: str, human_name: str | None, **kwargs: Any) -> dict[str, Any]:
    from switchboard.errors import NotFound
    from switchboard.inbox import items as inbox_ops
    from switchboard.models import InboxItem

    hub = _hub_cli()
    try:
        with hub.db.write() as s:
            row_ = s.get(InboxItem, item_id)
            if row_ is None:
                raise NotFound("no such inbox item")
            human_id = directory.human_by_name(s, human_name).id if human_name else row_.human_id
            data, agent_id = inbox_ops.resolve(s, hub.clock, item_id, via="cli", human_id=human_id, **kwargs)
        # Over Redis this rings the agent's inbox_wait at once; embedded, `serve` notices the
        # resolution on its next maintenance pass (every reap interval, 2 s by default).
        hub.broker.publish_inbox(agent_id)
    finally:
        hub.close()
    return data


@inbox.command("answer")
@click.argument("item_id")
@click.argument("answer")
@click.option("--as", "human_name", default=None, help="The answering human (default: the item's human).")
@admin
def inbox_answer(item_id: str, answer: str, human_name: str | None) -> tuple[dict[str, Any], str]:
    """Answer the question ITEM_ID with ANSWER (one of its options, when it has some)."""
    data = _resolve_as(item_id, human_name, answer=answer)
    return data, f"{item_id} answered"


@inbox.command("decide")
@click.argument("item_id")
@click.argument("decision", type=click.Choice(["approve", "deny"]))
@click.option("--note", default=None, help="Why (shown to the agent).")
@click.option("--as", "human_name", default=None, help="The deciding human (default: the item's human).")
@admin
def inbox_decide(item_id: str, decision: str, note: str | None, human_name: str | None) -> tuple[dict[str, Any], str]:
    """Approve or deny the approval ITEM_ID."""
    data = _resolve_as(item_id, human_name, decision=decision, note=note)
    return data, f"{item_id} {decision}d"


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
    import socket

    with clear_errors():
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            try:
                probe.bind((settings.host, settings.port))
            except OSError as exc:
                raise ConfigError([f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}"]) from None
        app = create_app(settings)
        if settings.redis_url:
            import redis

            redis.Redis.from_url(settings.redis_url).ping()
    _announce(settings, f"switchboard {__version__} on http://{settings.host}:{settings.port} "
              f"({'sqlite' if settings.is_sqlite else 'postgresql ' + _redacted_url(settings.database_url)}, "
              f"{'rq jobs on ' + _redacted_url(settings.redis_url) if settings.redis_url else 'inline jobs'})")
    _print_source_urls(settings)
    # X-Forwarded-* are honoured by the app itself, only from SWITCHBOARD_TRUSTED_PROXIES
    # (switchboard.web.forwarded); uvicorn's own handling would trust loopback peers first.
    from switchboard.web.server_protocol import uvicorn_options

    # log_config=None: uvicorn's loggers go through the root handlers and their redaction filter
    # (issue 13 item 6), in both log formats.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower(), lifespan="on",
                proxy_headers=False, log_config=None, **uvicorn_options(settings))


def _http_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter("give the hub's base URL with its scheme, e.g. http://127.0.0.1:8080")
    path = parts.path.rstrip("/")
    if path.endswith("/mcp"):
        # The hub's /mcp endpoint is for MCP clients over HTTP; the adapter wants the base URL.
        # A common mix-up: take the base rather than fail every call with a 404.
        base = parts._replace(path=path[: -len("/mcp")], query="", fragment="").geturl()
        click.echo(f"note: --url {value} is the hub's /mcp endpoint; the adapter uses the base URL {base}",
                   err=True)
        return base
    return value


@main.command()
@click.option("--url", required=True, callback=_http_url, help="The hub's base URL, e.g. http://127.0.0.1:8080")
def channel(url: str) -> None:
    """Run the stdio channel adapter for Claude Code (token from SWITCHBOARD_TOKEN)."""
    from switchboard.mcp_server.channel import run_channel

    tok = os.environ.get("SWITCHBOARD_TOKEN", "").strip()
    if not tok:
        # Not an exit: Claude Code would show a failed server and no tools. The adapter serves
        # its tools; each call answers ``unauthenticated`` with this fix (issue 10 item 3).
        click.echo("error unauthenticated: SWITCHBOARD_TOKEN is not set: set it to the agent's token "
                   "(switchboard token vend AGENT) in the env of the server in .mcp.json", err=True)
    run_channel(url, tok, _settings().log_level)


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
    with clear_errors():
        run_worker(settings, burst=burst)


@main.group()
def vault() -> None:
    """The vault: secret values behind refs, AES-256-GCM encrypted (key ring: SWITCHBOARD_VAULT_KEYS)."""


@vault.command("rotate")
@admin
def vault_rotate() -> tuple[dict[str, Any], str]:
    """Re-encrypt every secret under a new primary key and retire the old ones.

    With SWITCHBOARD_VAULT_KEYS unset, a new key is generated in the instance folder. With it
    set, put the new key first, run this, then remove the retired ids it prints.
    """
    from switchboard.intake import vault as vault_mod

    hub = _hub_cli()
    try:
        done = vault_mod.rotate(hub)
    finally:
        hub.close()
    retired = ", ".join(done.retired) or "none"
    hint = (" (remove them from SWITCHBOARD_VAULT_KEYS)" if hub.settings.vault_keys and done.retired else "")
    lost = (f"; {len(done.unreadable)} records are sealed under keys no longer in the ring and were left "
            "as they are (restore the old key to SWITCHBOARD_VAULT_KEYS or vault.keys to read them)"
            if done.unreadable else "")
    return ({"primary": done.primary, "re_encrypted": done.re_encrypted, "retired": done.retired,
             "unreadable": done.unreadable},
            f"primary key {done.primary}; {done.re_encrypted} secrets re-encrypted; retired: {retired}{hint}{lost}")


@human.command("notify")
@click.argument("name")
@click.option("--url", default=None, help="An Apprise URL (slack://..., tgram://..., ntfy://..., json://...).")
@click.option("--off", is_flag=True, help="Stop notifications for NAME.")
@admin
def human_notify(name: str, url: str | None, off: bool) -> tuple[dict[str, Any], str]:
    """Notify NAME when a permission prompt waits (Apprise URL, stored encrypted), or --off."""
    from switchboard.errors import InvalidArgument
    from switchboard.inbox import alerts

    if off == (url is not None):
        raise InvalidArgument("give exactly one of --url APPRISE_URL or --off")
    hub = _hub_cli()
    try:
        with hub.db.write() as s:
            data = alerts.set_target(s, hub.clock, directory.human_by_name(s, name).id, None if off else url)
    finally:
        hub.close()
    return {"human": name, **data}, f"{name}: prompt notifications {'on' if data['notify'] else 'off'}"


@main.group()
def friend() -> None:
    """Friendships between agents of different humans: list and revoke them (the human side)."""


@friend.command("list")
@click.option("--human", "human_name", default=None, help="Only friendships this human is part of.")
@admin
def friend_list(human_name: str | None) -> tuple[dict[str, Any], str]:
    """List friendships, newest first."""
    from switchboard.friends import requests as friends

    hub = _hub_cli()
    try:
        with hub.db.read() as s:
            human_id = directory.human_by_name(s, human_name).id if human_name else None
            rows = friends.list_for_human(s, human_id)
    finally:
        hub.close()
    lines = [f"{f['friendship_id']} {f['from_agent']} ({f['from_human']}) -> {f['to_agent']} ({f['to_human']}) "
             f"on {', '.join(f['queues'])}{'' if f['active'] else ' [revoked]'}" for f in rows]
    return {"friendships": rows}, "\n".join(lines) or "no friendships"


@friend.command("revoke")
@click.argument("friendship_id")
@click.option("--as", "human_name", default=None,
              help="The revoking human, either side (default: the human whose agent receives the work).")
@admin
def friend_revoke(friendship_id: str, human_name: str | None) -> tuple[dict[str, Any], str]:
    """Revoke FRIENDSHIP_ID: no new todos flow through it from this moment."""
    from switchboard.errors import NotFound
    from switchboard.friends import requests as friends
    from switchboard.models import Friendship

    hub = _hub_cli()
    try:
        with hub.db.write() as s:
            fs = s.get(Friendship, friendship_id)
            if fs is None:
                raise NotFound("no such friendship")
            human_id = directory.human_by_name(s, human_name).id if human_name else fs.to_human_id
            data = friends.revoke(s, hub.clock, friendship_id, human_id=human_id)
    finally:
        hub.close()
    return data, f"{friendship_id} revoked"

@main.command()
@click.argument("agent_name", metavar="AGENT")
@click.option("--wait", "wait_seconds", default=20.0, show_default=True, type=click.FloatRange(0, 600),
              help="Seconds to wait for the agent to acknowledge the test wake.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def doctor(agent_name: str, wait_seconds: float, as_json: bool) -> None:
    """Ring AGENT's doorbell: does a wake reach its model? (DESIGN.md §6.5)

    Sends a test wake to every attached session of AGENT (the running ``serve`` process
    forwards it within a few seconds) and waits for the model to call ``doorbell_ack``. Prints
    heard, unheard (attached, but Claude Code drops the wakes: channels not enabled for this
    server) or no_session, with the fix; exits 0 only for heard.
    """
    import time

    from switchboard import directory
    from switchboard.notify import doorbell
    from switchboard.notify.wakes import waiting_for

    with clear_errors(as_json):
        hub = _hub_cli()
        try:
            with hub.db.write() as s:
                agent = directory.agent_by_name(s, agent_name)
                rung = doorbell.ring(s, hub.clock, agent.id)
                _, waiting = waiting_for(s, agent.id)
            verdict = "no_session"
            if rung["sessions"]:
                deadline = time.monotonic() + wait_seconds
                while True:
                    with hub.db.read() as s:
                        verdict = doorbell.verdict(s, agent.id, rung["ring_id"])
                    if verdict == "heard" or time.monotonic() >= deadline:
                        break
                    time.sleep(0.2)
        finally:
            hub.close()
    data = {"agent": agent_name, "ring_id": rung["ring_id"], "sessions": rung["sessions"], "verdict": verdict,
            "fix": doorbell.VERDICTS[verdict], "waiting_todos": waiting}
    _emit(as_json, data, f"{verdict}: {rung['sessions']} session(s) attached; {waiting} todo(s) waiting.\n"
                         f"{doorbell.VERDICTS[verdict]}")
    sys.exit(0 if verdict == "heard" else 1)
# --- operations (issue 14): migrate, source show, prune, delivery replay, backup -----------------


@main.command("migrate")
@admin
def migrate_cmd() -> tuple[dict[str, Any], str]:
    """Apply database migrations up to this version's head (safe while serving)."""
    from switchboard.db import upgrade
    from switchboard.schema import current_revision, head_revision

    settings = _settings()
    before = current_revision(settings)
    upgrade(settings)
    head = head_revision()
    text = f"schema at {head}" + (f" (was {before})" if before != head else " (already)")
    return {"before": before, "revision": head}, text


@source.command("show")
@click.argument("source_id")
@admin
def source_show(source_id: str) -> tuple[dict[str, Any], str]:
    """A source: settings, deliveries by status, and refused deliveries by reason (never bodies)."""
    from sqlalchemy import func, select

    from switchboard import refusals
    from switchboard.errors import NotFound
    from switchboard.models import Delivery, Project, Source

    hub = _hub_cli()
    now = hub.clock.now()
    with hub.db.read() as s:
        src = s.get(Source, source_id) if source_id.startswith("src_") else None
        if src is None:
            raise NotFound("no such source")
        project_name = s.get(Project, src.project_id).name  # type: ignore[union-attr]
        secrets = directory.source_secrets(s, src.id, now)
        by_status = dict(s.execute(select(Delivery.status, func.count()).where(Delivery.source_id == src.id)
                                   .group_by(Delivery.status)).all())
        last = s.execute(select(func.max(Delivery.received_at)).where(Delivery.source_id == src.id)).scalar()
        refused = refusals.for_source(s, src.id)
    data = {"id": src.id, "project": project_name, "provider": src.provider, "queue": src.queue,
            "enabled": src.enabled, "url": f"{hub.settings.public_url}/hooks/{src.id}",
            "valid_secrets": len(secrets), "trusted_humans": src.trusted_humans,
            "deliveries": {k: int(v) for k, v in sorted(by_status.items())},
            "last_delivery_at": last.isoformat() if last else None, "refused": refused}
    lines = [f"source {src.id} ({src.provider}) -> {project_name}/{src.queue}"
             + ("" if src.enabled else " [disabled]"), f"webhook URL: {data['url']}",
             f"valid secrets: {len(secrets)}",
             "deliveries: " + (", ".join(f"{k} {v}" for k, v in data["deliveries"].items()) or "none")
             + (f" (last {data['last_delivery_at']})" if last else "")]
    if refused:
        lines.append("refused (not stored):")
        lines += [f"  {r['reason']}: {r['count']} (last {', '.join(r['last_at'])})" for r in refused]
    else:
        lines.append("refused (not stored): none")
    return data, "\n".join(lines)


@main.command("prune")
@click.option("--dry-run", is_flag=True, help="Only count what would be dropped.")
@admin
def prune_cmd(dry_run: bool) -> tuple[dict[str, Any], str]:
    """Drop raw bodies older than SWITCHBOARD_RAW_BODY_DAYS and deliveries and feed events older
    than SWITCHBOARD_RETENTION_DAYS (serve does this hourly)."""
    from switchboard.retention import prune

    hub = _hub_cli()
    try:
        report = prune(hub, dry_run=dry_run)
    finally:
        hub.close()
    verb = "would drop" if dry_run else "dropped"
    return report.to_dict(), (f"{verb} {report.raw_bodies} raw bodies (before {report.body_cutoff:%Y-%m-%d}), "
                              f"{report.deliveries} deliveries and {report.feed_events} feed events "
                              f"(before {report.row_cutoff:%Y-%m-%d})")


@delivery.command("replay")
@click.argument("delivery_id")
@admin
def delivery_replay(delivery_id: str) -> tuple[dict[str, Any], str]:
    """Process a stored delivery again (failed, or processed before a fix); makes nothing twice."""
    from switchboard.replay import replay

    hub = _hub_cli()
    try:
        data = replay(hub, delivery_id)
    finally:
        hub.close()
    todo_text = ""
    if data["todo_id"]:
        todo_text = f", todo {data['todo_id']}" + (" (new)" if data["todo_created"] else " (existing)")
    return data, f"delivery {delivery_id}: {data['status']}{todo_text}"


@main.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@admin
def backup_cmd(path: str) -> tuple[dict[str, Any], str]:
    """Copy the SQLite database to PATH while serving (PostgreSQL: prints the pg_dump command)."""
    from pathlib import Path

    from switchboard.backup import backup

    settings = _settings()
    if settings.is_sqlite:
        from switchboard.schema import require_at_head

        require_at_head(settings)
    done = backup(settings, Path(path))
    keys = (f"{settings.home / 'vault.keys'}" if not settings.vault_keys else "SWITCHBOARD_VAULT_KEYS")
    text = (f"backed up to {done['path']} ({done['bytes']} bytes); the vault key ring is not in it: "
            f"keep {keys} safe as well")
    return {**done, "vault_keys": keys}, text


def _print_source_urls(settings: Settings) -> None:
    """At ``serve`` start: each source's webhook URL at the address really served (stderr)."""
    from sqlalchemy import select

    from switchboard.db import Database
    from switchboard.models import Project, Source

    db = Database(settings)
    try:
        with db.read() as s:
            rows = s.execute(select(Source, Project.name).join(Project, Project.id == Source.project_id)
                             .where(Source.enabled).order_by(Source.created_at).limit(50)).all()
    finally:
        db.dispose()
    host = settings.host
    local_host = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else
                                                               (f"[{host}]" if ":" in host else host))
    local = f"http://{local_host}:{settings.port}"
    for src, project_name in rows:
        line = f"  {src.provider:<17} {project_name}/{src.queue}: {local}/hooks/{src.id}"
        if settings.public_url != local and os.environ.get("SWITCHBOARD_PUBLIC_URL"):
            line += f"  (public: {settings.public_url}/hooks/{src.id})"
        _announce(settings, line)
    if not rows:
        _announce(settings, "  no sources yet: `switchboard source add --project P --provider github`")


def _announce(settings: Settings, text: str) -> None:
    """A start-up line of ``serve`` on stderr: plain text, or a JSON log record with
    ``SWITCHBOARD_LOG_FORMAT=json`` (so every stderr line parses), whatever the log level."""
    if settings.log_format != "json":
        click.echo(text, err=True)
        return
    import logging

    log = logging.getLogger("switchboard.serve")
    log.setLevel(logging.INFO)
    log.info(text.strip())


from switchboard import cli_revoke  # noqa: E402,F401  (token revoke|list, grant revoke, agent remove)
