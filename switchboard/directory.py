"""Humans, identities, agents, tokens, projects, grants and sources: the admin operations.

Used by the CLI (and later the REST API). Every function takes a write session and raises
:class:`~switchboard.errors.InvalidArgument`, :class:`~switchboard.errors.NotFound` or
:class:`~switchboard.errors.Conflict` with a message naming the offending value.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets as pysecrets

from sqlalchemy import select
from sqlmodel import Session

from switchboard.errors import Conflict, InvalidArgument, NotFound, Unauthenticated
from switchboard.models import Agent, Grant, Human, HumanToken, Identity, Project, Source, SourceSecret, Token
from switchboard.sources import PROVIDERS, adapter_for

ROLES = ("read", "work")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}")
TOKEN_PREFIX = "sbk_"
HUMAN_TOKEN_PREFIX = "shh_"


def check_name(kind: str, name: str) -> str:
    """Validate a human, agent or project name: 1-100 of ``A-Z a-z 0-9 _ . @ -``.

    Raises:
        InvalidArgument: the name is empty or has other characters.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"{kind} name must be 1-100 characters of letters, digits, '_', '.', '@', '-' "
            "and start with a letter or digit"
        )
    return name


def _unique(session: Session, model: type, name: str, kind: str) -> None:
    if session.execute(select(model).where(model.name == name)).first() is not None:  # type: ignore[attr-defined]
        raise Conflict(f"{kind} {name!r} already exists")


def add_human(session: Session, name: str) -> Human:
    """Create a human. Raises ``Conflict`` if the name is taken."""
    check_name("human", name)
    _unique(session, Human, name, "human")
    human = Human(name=name)
    session.add(human)
    session.flush()
    return human


def human_by_name(session: Session, name: str) -> Human:
    """Return the human called ``name``. Raises ``NotFound``."""
    human = session.execute(select(Human).where(Human.name == name)).scalars().first()
    if human is None:
        raise NotFound(f"no human named {name!r}")
    return human


def link_identity(
    session: Session, human_name: str, provider: str, external_id: str, workspace: str = "", login: str | None = None
) -> Identity:
    """Link a provider account (by stable id) to a human (DESIGN.md §1, §5).

    Raises:
        InvalidArgument: unknown provider or empty id. Conflict: the account is linked already.
        NotFound: no such human.
    """
    if provider not in PROVIDERS:
        raise InvalidArgument(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
    external_id = (external_id or "").strip()
    if not external_id or len(external_id) > 200:
        raise InvalidArgument("external id must be 1-200 characters (the provider's stable user id)")
    if provider == "github" and not external_id.isdigit():
        raise InvalidArgument("a GitHub external id is the numeric user id (sender.id), not the login")
    human = human_by_name(session, human_name)
    existing = session.execute(
        select(Identity).where(
            Identity.provider == provider, Identity.workspace == workspace, Identity.external_id == external_id
        )
    ).scalars().first()
    if existing is not None:
        raise Conflict(f"{provider} account {external_id} is already linked")
    identity = Identity(human_id=human.id, provider=provider, workspace=workspace, external_id=external_id,
                        login=login)
    session.add(identity)
    session.flush()
    return identity


def add_project(session: Session, name: str) -> Project:
    """Create a project. Raises ``Conflict`` if the name is taken."""
    check_name("project", name)
    _unique(session, Project, name, "project")
    project = Project(name=name)
    session.add(project)
    session.flush()
    return project


def project_by_name(session: Session, name: str) -> Project:
    """Return the project called ``name``. Raises ``NotFound``."""
    project = session.execute(select(Project).where(Project.name == name)).scalars().first()
    if project is None:
        raise NotFound(f"no project named {name!r}")
    return project


def add_source(
    session: Session, project_name: str, provider: str, secret: str | None = None, queue: str = "default"
) -> tuple[Source, str]:
    """Create a source with one secret (generated when ``secret`` is ``None``).

    Returns:
        ``(source, secret)``; the secret is shown once by the CLI.

    Raises:
        InvalidArgument: unknown provider, unusable secret or queue name. NotFound: no project.
    """
    adapter = adapter_for(provider)
    check_name("queue", queue)
    if secret is None:
        secret = base64.urlsafe_b64encode(os.urandom(32)).decode("ascii").rstrip("=")
    adapter.validate_secret(secret)
    project = project_by_name(session, project_name)
    source = Source(project_id=project.id, provider=provider, queue=queue)
    session.add(source)
    session.flush()
    session.add(SourceSecret(source_id=source.id, secret=secret))
    session.flush()
    return source, secret


def add_agent(session: Session, name: str, human_name: str) -> Agent:
    """Create an agent owned by a human. Raises ``Conflict`` or ``NotFound``."""
    check_name("agent", name)
    _unique(session, Agent, name, "agent")
    human = human_by_name(session, human_name)
    agent = Agent(name=name, human_id=human.id)
    session.add(agent)
    session.flush()
    return agent


def agent_by_name(session: Session, name: str) -> Agent:
    """Return the agent called ``name``. Raises ``NotFound``."""
    agent = session.execute(select(Agent).where(Agent.name == name)).scalars().first()
    if agent is None:
        raise NotFound(f"no agent named {name!r}")
    return agent


def token_digest(token: str) -> str:
    """SHA-256 hex of a token: what is stored (DESIGN.md §1)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def vend_token(session: Session, agent_name: str) -> str:
    """Vend a new token ``sbk_`` + 32 random bytes (url-safe base64) for an agent.

    Returns:
        The token; only its SHA-256 is stored, so it is shown once.
    """
    agent = agent_by_name(session, agent_name)
    token = TOKEN_PREFIX + pysecrets.token_urlsafe(32)
    session.add(Token(agent_id=agent.id, token_sha256=token_digest(token)))
    session.flush()
    return token


def authenticate(session: Session, token: str | None) -> Agent:
    """Resolve a bearer token to its agent (the actor of every agent call).

    Raises:
        Unauthenticated: missing, malformed, unknown or revoked token (one message for all).
    """
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        raise Unauthenticated("a valid agent token is required")
    row = session.execute(
        select(Agent).join(Token, Token.agent_id == Agent.id).where(
            Token.token_sha256 == token_digest(token), Token.revoked_at.is_(None)  # type: ignore[union-attr]
        )
    ).scalars().first()
    if row is None:
        raise Unauthenticated("a valid agent token is required")
    return row


def vend_human_token(session: Session, human_name: str) -> str:
    """Vend a human API token ``shh_`` + 32 random bytes; only its SHA-256 is stored.

    Raises:
        NotFound: no such human.
    """
    human = human_by_name(session, human_name)
    token = HUMAN_TOKEN_PREFIX + pysecrets.token_urlsafe(32)
    session.add(HumanToken(human_id=human.id, token_sha256=token_digest(token)))
    session.flush()
    return token


def authenticate_human(session: Session, token: str | None) -> Human:
    """Resolve a human API token to its human.

    Raises:
        Unauthenticated: missing, malformed, unknown or revoked token (one message for all).
    """
    if not token or not token.startswith(HUMAN_TOKEN_PREFIX) or len(token) > 200:
        raise Unauthenticated("a valid human token is required")
    row = session.execute(
        select(Human).join(HumanToken, HumanToken.human_id == Human.id).where(
            HumanToken.token_sha256 == token_digest(token), HumanToken.revoked_at.is_(None)  # type: ignore[union-attr]
        )
    ).scalars().first()
    if row is None:
        raise Unauthenticated("a valid human token is required")
    return row


def grant(session: Session, agent_name: str, project_name: str, role: str) -> Grant:
    """Give an agent ``read`` or ``work`` on a project (replacing an earlier role).

    Raises:
        InvalidArgument: unknown role. NotFound: no such agent or project.
    """
    if role not in ROLES:
        raise InvalidArgument(f"role must be one of {', '.join(ROLES)}")
    agent = agent_by_name(session, agent_name)
    project = project_by_name(session, project_name)
    row = session.execute(
        select(Grant).where(Grant.agent_id == agent.id, Grant.project_id == project.id)
    ).scalars().first()
    if row is None:
        row = Grant(agent_id=agent.id, project_id=project.id, role=role)
        session.add(row)
    else:
        row.role = role
    session.flush()
    return row


def grants_of(session: Session, agent_id: str) -> dict[str, str]:
    """``{project_id: role}`` for an agent."""
    rows = session.execute(select(Grant.project_id, Grant.role).where(Grant.agent_id == agent_id)).all()
    return {pid: role for pid, role in rows}


def source_secrets(session: Session, source_id: str, now: object) -> list[str]:
    """The source's secrets that are valid at ``now`` (unexpired)."""
    rows = session.execute(select(SourceSecret).where(SourceSecret.source_id == source_id)).scalars().all()
    return [r.secret for r in rows if r.expires_at is None or r.expires_at > now]  # type: ignore[operator]
