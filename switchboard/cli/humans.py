"""``switchboard human|identity|login``: the people, their provider accounts, their web sign-in."""

from __future__ import annotations

from typing import Any

import click

from switchboard import directory
from switchboard.cli.base import admin, main, open_hub
from switchboard.errors import InvalidArgument
from switchboard.sources import PROVIDERS


@main.group()
def human() -> None:
    """Humans: the people who own agents and projects."""


@human.command("add")
@click.argument("name")
@admin
def human_add(name: str) -> tuple[dict[str, Any], str]:
    """Add a human called NAME."""
    with open_hub().db.write() as s:
        h = directory.add_human(s, name)
        return {"id": h.id, "name": h.name}, f"human {h.name} ({h.id})"


@human.command("list")
@admin
def human_list() -> tuple[dict[str, Any], str]:
    """List humans with their linked identities, agents and owned projects."""
    from sqlalchemy import select

    from switchboard.models import Agent, Human, Identity, Project, ProjectOwner

    with open_hub().db.read() as s:
        humans = s.execute(select(Human).order_by(Human.name)).scalars().all()
        idents = s.execute(select(Identity.human_id, Identity.provider, Identity.login, Identity.external_id)).all()
        agents = s.execute(select(Agent.human_id, Agent.name).order_by(Agent.name)).all()
        owned = s.execute(select(ProjectOwner.human_id, Project.name)
                          .join(Project, Project.id == ProjectOwner.project_id).order_by(Project.name)).all()
    data = [{"id": h.id, "name": h.name,
             "identities": [f"{p}:{login or ext}" for hid, p, login, ext in idents if hid == h.id],
             "agents": [n for hid, n in agents if hid == h.id],
             "projects": [n for hid, n in owned if hid == h.id]} for h in humans]
    text = "\n".join(f"{d['name']} ({d['id']}): identities {', '.join(d['identities']) or 'none'}; "
                     f"agents {', '.join(d['agents']) or 'none'}; owns {', '.join(d['projects']) or 'nothing'}"
                     for d in data)
    return {"humans": data}, text or "no humans"


@human.command("token")
@click.argument("name")
@admin
def human_token(name: str) -> tuple[dict[str, Any], str]:
    """Vend an API token for the human NAME (for /api/v1/human; shown once)."""
    with open_hub().db.write() as s:
        value = directory.vend_human_token(s, name)
    return {"human": name, "token": value}, value


@human.command("notify")
@click.argument("name")
@click.option("--url", default=None, help="An Apprise URL (slack://..., tgram://..., ntfy://..., json://...).")
@click.option("--off", is_flag=True, help="Stop notifications for NAME.")
@admin
def human_notify(name: str, url: str | None, off: bool) -> tuple[dict[str, Any], str]:
    """Notify NAME when a permission prompt waits (Apprise URL, stored encrypted), or --off."""
    from switchboard.inbox import alerts

    if off == (url is not None):
        raise InvalidArgument("give exactly one of --url APPRISE_URL or --off")
    hub = open_hub()
    try:
        with hub.db.write() as s:
            data = alerts.set_target(s, hub.clock, directory.human_by_name(s, name).id, None if off else url)
    finally:
        hub.close()
    return {"human": name, **data}, f"{name}: prompt notifications {'on' if data['notify'] else 'off'}"


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
    with open_hub().db.write() as s:
        i = directory.link_identity(s, human_name, provider, external_id, workspace, login)
        return ({"id": i.id, "human": human_name, "provider": i.provider, "workspace": i.workspace,
                 "external_id": i.external_id},
                f"linked {provider} {(i.workspace + ':') if i.workspace else ''}{i.external_id} to {human_name}")


@main.command("login")
@click.argument("human_name")
@admin
def login_cmd(human_name: str) -> tuple[dict[str, Any], str]:
    """Print a one-time web UI login link for HUMAN_NAME (single use, valid 10 minutes)."""
    from switchboard.web import logins

    hub = open_hub()
    with hub.db.write() as s:
        token = logins.create_link(s, hub.clock, human_name)
    url = logins.link_url(hub.settings, token)
    return ({"human": human_name, "url": url, "expires_in_seconds": logins.LOGIN_LINK_SECONDS},
            f"{url}\n(one-time link for {human_name}: open it within 10 minutes)")
