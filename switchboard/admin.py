"""Humans, identities, agents, tokens, projects, grants and sources: the admin operations.

Used by the CLI, the human REST routes and the web UI, and read by the agent surface (grants,
name lookups). Every function takes a session and raises
:class:`~switchboard.errors.InvalidArgument`, :class:`~switchboard.errors.NotFound` or
:class:`~switchboard.errors.Conflict` with a message naming the offending value.
"""

from __future__ import annotations

import hashlib
import re
import secrets as pysecrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select
from sqlmodel import Session

from switchboard.errors import Conflict, InvalidArgument, NotFound, Unauthenticated
from switchboard.models import (
    Agent,
    Grant,
    Human,
    HumanToken,
    Identity,
    Project,
    ProjectOwner,
    Source,
    SourceSecret,
    Token,
)
from switchboard.prepared import Prepared
from switchboard.sources import SourceAdapter, adapter_for

ROLES = ("read", "work")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}")
TOKEN_PREFIX = "sbk_"


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


def _by_name(session: Session, model: Any, kind: str, name: str) -> Any:
    """The ``model`` row called ``name``. Raises ``NotFound`` naming the ``kind``."""
    row = session.execute(select(model).where(model.name == name)).scalars().first()
    if row is None:
        raise NotFound(f"no {kind} named {name!r}")
    return row


def human_by_name(session: Session, name: str) -> Human:
    """Return the human called ``name``. Raises ``NotFound``."""
    return _by_name(session, Human, "human", name)  # type: ignore[no-any-return]


def link_identity(
    session: Session, human_name: str, provider: str, external_id: str, workspace: str = "", login: str | None = None
) -> Identity:
    """Link a provider account (by stable id) to a human (DESIGN.md §1, §5).

    Raises:
        InvalidArgument: unknown provider, or an id or workspace the provider's senders never
            carry (each adapter's ``validate_identity``). Conflict: the account is linked already.
        NotFound: no such human.
    """
    adapter = adapter_for(provider)
    external_id = (external_id or "").strip()
    workspace = (workspace or "").strip()
    if not external_id or len(external_id) > 200 or len(workspace) > 200:
        raise InvalidArgument("external id must be 1-200 characters (the provider's stable user id)")
    adapter.validate_identity(workspace, external_id)
    workspace, external_id = adapter.normalize_identity(workspace, external_id)
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
    return _by_name(session, Project, "project", name)  # type: ignore[no-any-return]


def add_source(
    session: Session, project_name: str, provider: str, secret: str | None = None, queue: str = "default"
) -> tuple[Source, str]:
    """Create a source with one secret (generated when ``secret`` is ``None`` and the provider
    lets us choose it; Slack, Discord, Teams and Mattermost issue their own keys).

    Returns:
        ``(source, secret)``; the secret is shown once by the CLI.

    Raises:
        InvalidArgument: unknown provider, unusable secret or queue name. NotFound: no project.
    """
    adapter = adapter_for(provider)
    check_name("queue", queue)
    secret = _new_secret(adapter, secret)
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
    return _by_name(session, Agent, "agent", name)  # type: ignore[no-any-return]


def assignable_agent(session: Session, name: object, project_id: str) -> Agent:
    """The agent called ``name`` if it may be given work on ``project_id`` (a ``work`` grant).

    Used wherever work is assigned or routed (CLI, REST, tools): an unknown agent and one that
    may not work on the project (another human's agent, a read-only or removed one) get the
    same answer, so names of other tenants' agents cannot be probed (issue 13 item 1).

    Raises:
        NotFound: one message for "no such agent" and "not yours to use".
    """
    agent = (session.execute(select(Agent).where(Agent.name == name)).scalars().first()
             if isinstance(name, str) else None)
    role = None if agent is None else session.execute(
        select(Grant.role).where(Grant.agent_id == agent.id, Grant.project_id == project_id)).scalar()
    if agent is None or agent.removed_at is not None or role != "work":
        raise NotFound("no agent by that name can work on this project")
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
    if agent.removed_at is not None:  # `agent remove` is final
        raise NotFound(f"no agent named {agent_name!r}")
    token = TOKEN_PREFIX + pysecrets.token_urlsafe(32)
    session.add(Token(agent_id=agent.id, token_sha256=token_digest(token)))
    session.flush()
    return token


def authenticate(session: Session, token: str | None) -> Agent:
    """Resolve a bearer token to its agent (the actor of every agent call).

    Raises:
        Unauthenticated: missing, malformed, unknown or revoked token (one message for all).
    """
    return _holder(session, token, TOKEN_PREFIX, Agent, Token, Token.agent_id, "agent")  # type: ignore[return-value]


def _holder(session: Session, token: str | None, prefix: str, principal: Any, table: Any, fk: Any,
            kind: str) -> Any:
    """The principal holding an unrevoked ``token`` (looked up by its SHA-256).

    Raises:
        Unauthenticated: one message for missing, malformed, unknown and revoked tokens.
    """
    if not token or not token.startswith(prefix) or len(token) > 200:
        raise Unauthenticated(f"a valid {kind} token is required")
    row = session.execute(
        select(principal).join(table, fk == principal.id).where(
            table.token_sha256 == token_digest(token), table.revoked_at.is_(None)
        )
    ).scalars().first()
    if row is None:
        raise Unauthenticated(f"a valid {kind} token is required")
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


def grants_of(session: Any, agent_id: str) -> dict[str, str]:
    """``{project_id: role}`` for an agent. ``session``: an ORM session, or a
    :func:`switchboard.direct.write` (the read is prepared: every agent tool call makes it)."""
    if isinstance(session, Session):
        session.flush()  # a grant added in this session counts (the ORM's autoflush)
    return {row["project_id"]: row["role"] for row in _GRANTS_OF.run(session, {"b_agent": agent_id})}


_GRANTS = Grant.__table__  # type: ignore[attr-defined]
_GRANTS_OF = Prepared(select(_GRANTS.c.project_id, _GRANTS.c.role).where(_GRANTS.c.agent_id == bindparam("b_agent")),
                      [_GRANTS.c.project_id, _GRANTS.c.role])


def source_secrets(session: Session, source_id: str, now: object) -> list[str]:
    """The source's secrets that are valid at ``now`` (unexpired)."""
    rows = session.execute(select(SourceSecret).where(SourceSecret.source_id == source_id)).scalars().all()
    return [r.secret for r in rows if r.expires_at is None or r.expires_at > now]  # type: ignore[operator]


HUMAN_TOKEN_PREFIX = "sbh_"


def vend_human_token(session: Session, human_name: str) -> str:
    """Vend an API token ``sbh_`` + 32 random bytes for a human (shown once, stored as SHA-256).

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
    return _holder(session, token, HUMAN_TOKEN_PREFIX, Human, HumanToken, HumanToken.human_id,  # type: ignore[return-value]
                   "human")


def add_owner(session: Session, project_name: str, human_name: str) -> ProjectOwner:
    """Make a human an owner of a project (idempotent).

    Raises:
        NotFound: no such project or human.
    """
    project = project_by_name(session, project_name)
    human = human_by_name(session, human_name)
    row = session.execute(select(ProjectOwner).where(
        ProjectOwner.project_id == project.id, ProjectOwner.human_id == human.id)).scalars().first()
    if row is None:
        row = ProjectOwner(project_id=project.id, human_id=human.id)
        session.add(row)
        session.flush()
    return row


def owned_projects(session: Session, human_id: str) -> list[str]:
    """Ids of the projects a human owns."""
    return list(session.execute(select(ProjectOwner.project_id).where(ProjectOwner.human_id == human_id)).scalars())
def _new_secret(adapter: SourceAdapter, secret: str | None) -> str:
    """Validate ``secret``, or generate one when the provider lets us.

    Raises:
        InvalidArgument: the provider issues its own key and none was given, or the key is
            unusable (strict format and length checks, never at request time).
    """
    if secret is None:
        if not adapter.generates_secret:
            raise InvalidArgument(f"{adapter.provider} issues its own key: pass it with --secret "
                                  f"({getattr(adapter, 'secret_help', 'the key')})")
        secret = adapter.new_secret()
    adapter.validate_secret(secret)
    return secret


def source_by_id(session: Session, source_id: str) -> Source:
    """Return the source ``source_id``. Raises ``NotFound``."""
    source = session.get(Source, source_id) if isinstance(source_id, str) else None
    if source is None:
        raise NotFound(f"no source {source_id!r}")
    return source


def rotate_secret(session: Session, source_id: str, now: datetime, keep_old_for: timedelta,
                  secret: str | None = None) -> tuple[SourceSecret, str]:
    """Add a new secret and let the current ones expire after ``keep_old_for``.

    Both are valid until then, so the sender can be switched without losing deliveries.

    Args:
        source_id: the source.
        now: the current time (UTC).
        keep_old_for: how long the old secrets stay valid (``0`` ends them now).
        secret: the new value; generated when ``None`` and the provider allows it.

    Returns:
        ``(row, secret)``; the secret is shown once by the CLI.

    Raises:
        NotFound: no such source. InvalidArgument: unusable secret, negative duration.
    """
    if keep_old_for < timedelta(0):
        raise InvalidArgument("--keep-old-for must not be negative")
    source = source_by_id(session, source_id)
    value = _new_secret(adapter_for(source.provider), secret)
    until = now + keep_old_for
    for row in session.execute(select(SourceSecret).where(SourceSecret.source_id == source.id)).scalars():
        if row.expires_at is None or row.expires_at > until:
            row.expires_at = until
    row = SourceSecret(source_id=source.id, secret=value, created_at=now)
    session.add(row)
    session.flush()
    return row, value


def set_trusted(session: Session, source_id: str, human_name: str, trusted: bool) -> list[str]:
    """Add a human to (or remove one from) a source's trusted list.

    The first change turns the default (every granted human with an identity) into an
    explicit list.

    Returns:
        The source's trusted human ids.

    Raises:
        NotFound: no such source or human.
    """
    source = source_by_id(session, source_id)
    human = human_by_name(session, human_name)
    current = list(source.trusted_humans or [])
    if trusted and human.id not in current:
        current.append(human.id)
    if not trusted:
        current = [h for h in current if h != human.id]
    source.trusted_humans = current
    session.flush()
    return current


def clear_trusted(session: Session, source_id: str) -> None:
    """Return a source to the default trust rule. Raises ``NotFound``."""
    source_by_id(session, source_id).trusted_humans = None
    session.flush()


def set_todo_events(session: Session, source_id: str, value: str) -> list[str] | None:
    """Set which event kinds of a source become todos (:mod:`switchboard.sources.routing`).

    Args:
        value: ``--todo-events`` text: comma-separated kinds, ``default`` or ``none``.

    Returns:
        The stored list (``None`` for the provider's default).

    Raises:
        NotFound: no such source. InvalidArgument: an entry that is not an event kind.
    """
    from switchboard.sources import routing

    source = source_by_id(session, source_id)
    source.todo_events = routing.parse_todo_events(source.provider, value)
    session.flush()
    return source.todo_events


_DURATION = re.compile(r"([0-9]{1,6})([smhd])")


def parse_duration(text: str) -> timedelta:
    """Parse ``90s``, ``30m``, ``24h``, ``7d`` (or ``0``).

    Raises:
        InvalidArgument: any other form.
    """
    if text.strip() == "0":
        return timedelta(0)
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise InvalidArgument("a duration is a number followed by s, m, h or d (e.g. 24h)")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
    return timedelta(**{unit: int(match.group(1))})
