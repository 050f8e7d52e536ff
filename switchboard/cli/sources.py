"""``switchboard source``: inbound webhook endpoints, their secrets, trust and routing."""

from __future__ import annotations

from typing import Any

import click

from switchboard import directory
from switchboard.cli.base import admin, main, open_hub
from switchboard.errors import InvalidArgument
from switchboard.sources import PROVIDERS

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
    from switchboard.sources import routing

    if allow_legacy_sha1 and provider != "github":
        raise InvalidArgument("--allow-legacy-sha1 applies to GitHub sources only")
    hub = open_hub()
    with hub.db.write() as s:
        src, value = directory.add_source(s, project_name, provider, secret, queue)
        src.allow_legacy_sha1 = allow_legacy_sha1
        odd: list[str] = []
        if todo_events is not None:
            odd = routing.unfamiliar(provider, directory.set_todo_events(s, src.id, todo_events))
    url = f"{hub.settings.public_url}/hooks/{src.id}"
    generated = secret is None
    text = f"source {src.id}\nwebhook URL: {url}\n" + (f"secret (shown once): {value}\n" if generated else "")
    if provider in ("github", "gitea", "forgejo", "mattermost"):
        text += "content type: application/json (form-encoded also works)"
    else:
        text += "content type: as the provider sends it"
    text += _unfamiliar_note(provider, odd)
    data = {"id": src.id, "url": url, "provider": provider, "queue": queue}
    if odd:
        data["unfamiliar_kinds"] = odd
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
    with open_hub().db.write() as s:
        stored = directory.set_todo_events(s, source_id, todo_events)
        provider = directory.source_by_id(s, source_id).provider
    shown = routing.effective(provider, stored)
    odd = routing.unfamiliar(provider, stored)
    data = {"id": source_id, "todo_events": shown, "todo_events_default": stored is None, "unfamiliar_kinds": odd}
    return data, (f"source {source_id}: todos from {', '.join(shown) or 'no events'}"
                  f"{' (default)' if stored is None else ''}" + _unfamiliar_note(provider, odd))


def _unfamiliar_note(provider: str, odd: list[str]) -> str:
    """A second line naming kinds that are none of ``provider``'s usual ones (maybe typos)."""
    from switchboard.sources import routing

    if not odd:
        return ""
    usual = ", ".join(sorted({e.split(".")[0] for e in routing.default_for(provider)}))
    return (f"\nnote: {', '.join(odd)}: not among {provider}'s usual kinds ({usual}); check the spelling "
            "(kinds are what `switchboard delivery list` shows)")


@source.command("rotate-secret")
@click.argument("source_id")
@click.option("--keep-old-for", default="24h", show_default=True,
              help="How long the old secret stays valid (e.g. 30m, 24h, 7d; 0 ends it now).")
@click.option("--secret", default=None, help="The new secret or key; generated when the provider allows.")
@admin
def source_rotate_secret(source_id: str, keep_old_for: str, secret: str | None) -> tuple[dict[str, Any], str]:
    """Add a new secret to SOURCE_ID; the old one expires after --keep-old-for."""
    hub = open_hub()
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
    with open_hub().db.write() as s:
        if use_default:
            directory.clear_trusted(s, source_id)
            return {"id": source_id, "trusted_humans": None}, f"source {source_id}: default trust"
        if not human_name:
            raise InvalidArgument("pass --human NAME (or --default)")
        ids = directory.set_trusted(s, source_id, human_name, trusted=not remove)
    return {"id": source_id, "trusted_humans": ids}, f"source {source_id}: {len(ids)} trusted human(s)"


@source.command("list")
@admin
def source_list() -> tuple[dict[str, Any], str]:
    """List sources with their project, provider, queue and webhook URL."""
    from sqlalchemy import select

    from switchboard.models import Project, Source
    from switchboard.sources import routing

    hub = open_hub()
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


@source.command("show")
@click.argument("source_id")
@admin
def source_show(source_id: str) -> tuple[dict[str, Any], str]:
    """A source: settings, deliveries by status, and refused deliveries by reason (never bodies)."""
    from sqlalchemy import func, select

    from switchboard import refusals
    from switchboard.errors import NotFound
    from switchboard.models import Delivery, Project, Source

    hub = open_hub()
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
