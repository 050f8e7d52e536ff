"""REST for ending access, for humans (issue 13 item 3): the CLI's ``token revoke``,
``grant revoke`` and ``agent remove``.

``Authorization: Bearer sbh_...``. A human acts on their own agents (another human's agent is
the same ``not_found`` as an unknown one), on their own API tokens, and on grants of their agents
or on projects they own. Open sessions and streams of a revoked token close within a second.

| route | what |
|---|---|
| ``POST /api/v1/human/agents/<name>/tokens/revoke`` (``token_id?``) | revoke one or all of the agent's tokens |
| ``GET /api/v1/human/agents/<name>/tokens`` | token ids and states |
| ``DELETE /api/v1/human/agents/<name>/grants/<project>`` | revoke a grant |
| ``DELETE /api/v1/human/agents/<name>`` | remove the agent |
| ``POST /api/v1/human/tokens/revoke`` (``token_id?``) | revoke one or all of the caller's own API tokens |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, jsonify, request

from switchboard import admin, revocation
from switchboard.errors import InvalidArgument
from switchboard.intake import json_shape
from switchboard.mcp_server.callers import bearer
from switchboard.web import rest_calls

if TYPE_CHECKING:
    pass

bp = Blueprint("rest_human_access", __name__, url_prefix="/api/v1/human")




def _token_id() -> str | None:
    body = json_shape.loads_object(request.get_data())
    unknown = set(body) - {"token_id"}
    if unknown:
        raise InvalidArgument(f"unknown field(s): {', '.join(sorted(unknown))}")
    value = body.get("token_id")
    if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= 100):
        raise InvalidArgument("token_id must be a token id from the token list")
    return value


@bp.post("/agents/<name>/tokens/revoke")
def revoke_agent_tokens(name: str) -> Any:
    """Revoke one (``token_id``) or every live token of one of the caller's agents.
    ---
    post:
      summary: Revoke an agent's tokens
      security: [{human: []}]
      parameters:
      - {in: path, name: name, required: true, schema: {type: string}}
      responses:
        200: {description: '{"revoked": [token ids]}'}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    hub = rest_calls.hub()
    token_id = _token_id()
    with hub.db.write() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        revoked = revocation.revoke_agent_tokens(s, hub.clock, name, token_id, owner_human_id=human.id)
    return jsonify({"revoked": revoked})


@bp.get("/agents/<name>/tokens")
def list_agent_tokens(name: str) -> Any:
    """Token ids of one of the caller's agents, with their state.
    ---
    get:
      summary: List an agent's tokens
      security: [{human: []}]
      parameters:
      - {in: path, name: name, required: true, schema: {type: string}}
      responses:
        200: {description: '{"tokens": [{id, created_at, revoked_at}]}'}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    from sqlalchemy import select

    from switchboard.models import Agent, Token

    hub = rest_calls.hub()
    with hub.db.read() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        agent = s.execute(select(Agent).where(Agent.name == name, Agent.human_id == human.id)).scalars().first()
        if agent is None or agent.removed_at is not None:
            from switchboard.errors import NotFound

            raise NotFound("no such agent")
        return jsonify({"tokens": revocation.list_tokens(s, Token, Token.agent_id, agent.id)})


@bp.delete("/agents/<name>/grants/<project>")
def revoke_grant(name: str, project: str) -> Any:
    """Revoke an agent's grant on a project (own agent, or a project the caller owns).
    ---
    delete:
      summary: Revoke a grant
      security: [{human: []}]
      parameters:
      - {in: path, name: name, required: true, schema: {type: string}}
      - {in: path, name: project, required: true, schema: {type: string}}
      responses:
        200: {description: '{"agent", "project", "revoked": true}'}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    hub = rest_calls.hub()
    with hub.db.write() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        return jsonify(revocation.revoke_grant(s, name, project, acting_human_id=human.id))


@bp.delete("/agents/<name>")
def remove_agent(name: str) -> Any:
    """Remove one of the caller's agents (tokens revoked, grants deleted, todos unassigned).
    ---
    delete:
      summary: Remove an agent
      security: [{human: []}]
      parameters:
      - {in: path, name: name, required: true, schema: {type: string}}
      responses:
        200: {description: '{"agent", "removed": true, "tokens_revoked"}'}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    hub = rest_calls.hub()
    with hub.db.write() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        return jsonify(revocation.remove_agent(s, hub.clock, name, owner_human_id=human.id))


@bp.post("/tokens/revoke")
def revoke_own_tokens() -> Any:
    """Revoke one (``token_id``) or every live API token of the caller (the calling one too).
    ---
    post:
      summary: Revoke the caller's own API tokens
      security: [{human: []}]
      responses:
        200: {description: '{"revoked": [token ids]}'}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    hub = rest_calls.hub()
    token_id = _token_id()
    with hub.db.write() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        return jsonify({"revoked": revocation.revoke_human_tokens(s, hub.clock, human.id, token_id)})
