"""``switchboard agent|token``: agents, their tokens, and revoking them (issue 13 item 3).

A running ``serve`` closes the open sessions and streams of a revoked token within a second
(:mod:`switchboard.web.revocation_watch`).
"""

from __future__ import annotations

from typing import Any

import click

from switchboard import directory, revocation
from switchboard.cli.base import admin, main, open_hub
from switchboard.errors import InvalidArgument


@main.group()
def agent() -> None:
    """Agents: AI workers owned by a human."""


@agent.command("add")
@click.argument("name")
@click.option("--human", "human_name", required=True)
@admin
def agent_add(name: str, human_name: str) -> tuple[dict[str, Any], str]:
    """Add an agent called NAME owned by a human."""
    with open_hub().db.write() as s:
        a = directory.add_agent(s, name, human_name)
        return {"id": a.id, "name": a.name, "human": human_name}, f"agent {a.name} ({a.id})"


@agent.command("list")
@admin
def agent_list() -> tuple[dict[str, Any], str]:
    """List agents with their human and grants."""
    from sqlalchemy import select

    from switchboard.models import Agent, Grant, Human, Project

    hub = open_hub()
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


@agent.command("remove")
@click.argument("agent_name")
@admin
def agent_remove(agent_name: str) -> tuple[dict[str, Any], str]:
    """Remove AGENT_NAME: tokens revoked, grants and subscriptions deleted, its pending todos unassigned."""
    hub = open_hub()
    try:
        with hub.db.write() as s:
            data = revocation.remove_agent(s, hub.clock, agent_name)
    finally:
        hub.close()
    return data, f"agent {agent_name} removed ({data['tokens_revoked']} token(s) revoked)"


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
    with open_hub().db.write() as s:
        value = directory.vend_token(s, agent_name)
    return {"agent": agent_name, "token": value}, value


@token.command("vend-human")
@click.argument("human_name")
@admin
def token_vend_human(human_name: str) -> tuple[dict[str, Any], str]:
    """Vend an API token for HUMAN_NAME (shown once): answers and decides inbox items over REST."""
    with open_hub().db.write() as s:
        value = directory.vend_human_token(s, human_name)
    return {"human": human_name, "token": value}, value


@token.command("revoke")
@click.argument("agent_name", required=False)
@click.option("--human", "human_name", default=None, help="Revoke this human's API tokens instead.")
@click.option("--token-id", default=None, help="Only this token (ids from `token list`); default: all.")
@admin
def token_revoke(agent_name: str | None, human_name: str | None, token_id: str | None) -> tuple[dict[str, Any], str]:
    """Revoke AGENT_NAME's tokens (or --human NAME's): refused at once, open sessions closed."""
    if (agent_name is None) == (human_name is None):
        raise InvalidArgument("name an agent, or a human with --human (not both)")
    hub = open_hub()
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
    hub = open_hub()
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
