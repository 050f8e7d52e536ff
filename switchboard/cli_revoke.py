"""``switchboard token revoke|list``, ``grant revoke``, ``agent remove`` (issue 13 item 3).

Registered on the groups of :mod:`switchboard.cli` (imported at its end), so that module only
gains one import. A running ``serve`` closes the open sessions and streams of a revoked token
within a second (:mod:`switchboard.web.revocation_watch`).
"""

from __future__ import annotations

from typing import Any

import click

from switchboard import directory, revocation
from switchboard.cli import _hub_cli, admin, agent, main, token
from switchboard.errors import InvalidArgument


@token.command("revoke")
@click.argument("agent_name", required=False)
@click.option("--human", "human_name", default=None, help="Revoke this human's API tokens instead.")
@click.option("--token-id", default=None, help="Only this token (ids from `token list`); default: all.")
@admin
def token_revoke(agent_name: str | None, human_name: str | None, token_id: str | None) -> tuple[dict[str, Any], str]:
    """Revoke AGENT_NAME's tokens (or --human NAME's): refused at once, open sessions closed."""
    if (agent_name is None) == (human_name is None):
        raise InvalidArgument("name an agent, or a human with --human (not both)")
    hub = _hub_cli()
    try:
        with hub.db.write() as s:
            if agent_name is not None:
                revoked = revocation.revoke_agent_tokens(s, hub.clock, agent_name, token_id)
                who = f"agent {agent_name}"
            else:
                human = directory.human_by_name(s, human_name or "")
                revoked = revocation.revoke_human_tokens(s, hub.clock, human.id, token_id)
                who = f"human {human_name}"
    finally:
        hub.close()
    return {"revoked": revoked}, f"{len(revoked)} token(s) of {who} revoked" + (
        f": {', '.join(revoked)}" if revoked else " (none were live)")


@token.command("list")
@click.argument("agent_name", required=False)
@click.option("--human", "human_name", default=None, help="List this human's API tokens instead.")
@admin
def token_list(agent_name: str | None, human_name: str | None) -> tuple[dict[str, Any], str]:
    """List token ids of AGENT_NAME (or --human NAME) with their state (never the tokens)."""
    from switchboard.models import HumanToken, Token

    if (agent_name is None) == (human_name is None):
        raise InvalidArgument("name an agent, or a human with --human (not both)")
    hub = _hub_cli()
    try:
        with hub.db.read() as s:
            if agent_name is not None:
                rows = revocation.list_tokens(s, Token, Token.agent_id, directory.agent_by_name(s, agent_name).id)
            else:
                rows = revocation.list_tokens(s, HumanToken, HumanToken.human_id,
                                              directory.human_by_name(s, human_name or "").id)
    finally:
        hub.close()
    text = "\n".join(f"{r['id']} created {r['created_at']}" + (f" revoked {r['revoked_at']}" if r["revoked_at"]
                                                                else " live") for r in rows) or "no tokens"
    return {"tokens": rows}, text


@agent.command("remove")
@click.argument("agent_name")
@admin
def agent_remove(agent_name: str) -> tuple[dict[str, Any], str]:
    """Remove AGENT_NAME: tokens revoked, grants and subscriptions deleted, its pending todos unassigned."""
    hub = _hub_cli()
    try:
        with hub.db.write() as s:
            data = revocation.remove_agent(s, hub.clock, agent_name)
    finally:
        hub.close()
    return data, f"agent {agent_name} removed ({data['tokens_revoked']} token(s) revoked)"


_grant_cmd = main.commands.pop("grant")


class _GrantGroup(click.Group):
    """``grant AGENT PROJECT --role R`` as before, plus ``grant revoke AGENT PROJECT``."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return _grant_cmd.name, _grant_cmd, args


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
    hub = _hub_cli()
    try:
        with hub.db.write() as s:
            data = revocation.revoke_grant(s, agent_name, project_name)
    finally:
        hub.close()
    return data, f"{agent_name} may no longer use {project_name}"
