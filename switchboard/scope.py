"""An agent's scope: the projects its grants let it read or work on (DESIGN.md §5, §6.2).

Shared by every agent-facing read (todos, leases, feed pages, inbox items, subscriptions); it
sits below them so none imports another for it. An unknown project and one the agent holds no
grant on are the same ``not_found`` (no existence oracle).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlmodel import Session

from switchboard.errors import Forbidden, NotFound
from switchboard.models import Project


def resolve_projects(session: Session, grants: dict[str, str], project: str | None, need_work: bool) -> list[str]:
    """Project ids the agent may use, narrowed to ``project`` (id or name) when given.

    Args:
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
    found = session.execute(
        select(Project.id).where((Project.id == project) | (Project.name == project))
    ).scalars().first()
    if found is None or found not in grants:
        raise NotFound("no such project")
    if need_work and grants[found] != "work":
        raise Forbidden("this agent has read access only on that project")
    return [found]
