"""An agent's scope: the projects its grants let it read or work on (DESIGN.md §5, §6.2).

Shared by every agent-facing read (todos, leases, feed pages, inbox items, subscriptions); it
sits below them so none imports another for it. An unknown project and one the agent holds no
grant on are the same ``not_found`` (no existence oracle).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlmodel import Session

from switchboard.errors import Forbidden, NotFound
from switchboard.models import Project
from switchboard.prepared import Prepared

_PROJECTS = Project.__table__  # type: ignore[attr-defined]
_PROJECT_ID = Prepared(
    select(_PROJECTS.c.id).where((_PROJECTS.c.id == bindparam("b_project")) | (_PROJECTS.c.name == bindparam("b_project")))
    .limit(1), [_PROJECTS.c.id])


def resolve_projects(session: Any, grants: dict[str, str], project: str | None, need_work: bool) -> list[str]:
    """Project ids the agent may use, narrowed to ``project`` (id or name) when given.

    Args:
        session: an ORM session, or a :func:`switchboard.direct.write` (the look-up is prepared).
        grants: The agent's grants, project id to role (``work`` or ``read``).
        project: A project id or name, or ``None`` for every granted project.
        need_work: Only projects where the agent has ``work``.

    Returns:
        Project ids (one when ``project`` is given).

    Raises:
        NotFound: ``project`` names nothing the agent can read (same answer as unknown).
        Forbidden: ``project`` is readable but ``need_work`` and the role is ``read``.
    """
    if project is None:
        wanted = [pid for pid, role in grants.items() if role == "work" or not need_work]
        return wanted
    if isinstance(session, Session):
        session.flush()  # a project added in this session counts (the ORM's autoflush)
    rows = _PROJECT_ID.run(session, {"b_project": project})
    found = rows[0]["id"] if rows else None
    if found is None or found not in grants:
        raise NotFound("no such project")
    if need_work and grants[found] != "work":
        raise Forbidden("this agent has read access only on that project")
    return [found]
