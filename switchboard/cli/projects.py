"""``switchboard project|grant``: projects, their owners, and agents' grants on them."""

from __future__ import annotations

from typing import Any

import click

from switchboard import admin as admin_ops
from switchboard import revocation
from switchboard.cli.base import admin, main, open_hub


@main.group()
def project() -> None:
    """Projects: the unit of scope for sources, todos and grants."""


@project.command("add")
@click.argument("name")
@click.option("--owner", "owners", multiple=True, help="A human who owns it (repeatable).")
@admin
def project_add(name: str, owners: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """Add a project called NAME."""
    with open_hub().db.write() as s:
        p = admin_ops.add_project(s, name)
        for owner in owners:
            admin_ops.add_owner(s, name, owner)
        return {"id": p.id, "name": p.name, "owners": list(owners)}, f"project {p.name} ({p.id})"


@project.command("list")
@admin
def project_list() -> tuple[dict[str, Any], str]:
    """List projects with their owners and sources."""
    from sqlalchemy import select

    from switchboard.models import Human, Project, ProjectOwner, Source

    with open_hub().db.read() as s:
        projects = s.execute(select(Project).order_by(Project.name)).scalars().all()
        owners = s.execute(select(ProjectOwner.project_id, Human.name)
                           .join(Human, Human.id == ProjectOwner.human_id).order_by(Human.name)).all()
        sources = s.execute(select(Source.project_id, Source.id, Source.provider)).all()
    data = [{"id": p.id, "name": p.name, "owners": [n for pid, n in owners if pid == p.id],
             "sources": [{"id": sid, "provider": prov} for pid, sid, prov in sources if pid == p.id]}
            for p in projects]
    text = "\n".join(f"{d['name']} ({d['id']}): owners {', '.join(d['owners']) or 'none'}; "
                     f"{len(d['sources'])} source(s)" for d in data)
    return {"projects": data}, text or "no projects"


@project.command("owner")
@click.argument("project_name")
@click.argument("human_name")
@admin
def project_owner(project_name: str, human_name: str) -> tuple[dict[str, Any], str]:
    """Make HUMAN_NAME an owner of PROJECT_NAME."""
    with open_hub().db.write() as s:
        admin_ops.add_owner(s, project_name, human_name)
    return {"project": project_name, "owner": human_name}, f"{human_name} owns {project_name}"


class _GrantContext(click.Context):
    @property
    def command_path(self) -> str:
        # ``grant AGENT PROJECT`` runs this command without naming it: usage and errors read
        # "switchboard grant ...", not "switchboard grant grant ...".
        return self.parent.command_path if self.parent is not None else super().command_path


class _GrantCommand(click.Command):
    context_class = _GrantContext


@click.command("grant", cls=_GrantCommand)
@click.argument("agent_name")
@click.argument("project_name")
@click.option("--role", type=click.Choice(list(admin_ops.ROLES)), required=True)
@admin
def grant_cmd(agent_name: str, project_name: str, role: str) -> tuple[dict[str, Any], str]:
    """Grant AGENT_NAME a role on PROJECT_NAME."""
    with open_hub().db.write() as s:
        admin_ops.grant(s, agent_name, project_name, role)
    return ({"agent": agent_name, "project": project_name, "role": role},
            f"{agent_name} may {role} on {project_name}")


class _GrantGroup(click.Group):
    """``grant AGENT PROJECT --role R`` as before, plus ``grant revoke AGENT PROJECT``."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return grant_cmd.name, grant_cmd, args


@main.group("grant", cls=_GrantGroup, context_settings={"ignore_unknown_options": True},
            help="Grant AGENT_NAME a role on PROJECT_NAME (`grant AGENT PROJECT --role work|read`), or "
                 "`grant revoke AGENT PROJECT`.")
def grant_group() -> None:
    pass


@grant_group.command("revoke")
@click.argument("agent_name")
@click.argument("project_name")
@admin
def grant_revoke(agent_name: str, project_name: str) -> tuple[dict[str, Any], str]:
    """Remove AGENT_NAME's grant on PROJECT_NAME (its pending todos there are unassigned)."""
    hub = open_hub()
    try:
        with hub.db.write() as s:
            data = revocation.revoke_grant(s, agent_name, project_name)
    finally:
        hub.close()
    return data, f"{agent_name} may no longer use {project_name}"
