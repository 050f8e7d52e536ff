"""Questions and approvals: what an agent asks a human (DESIGN.md §1, §5, §6.3, §6.7).

An agent posts an item in a project it may work on; a human answers (question) or decides
(approval) through the CLI, REST or later the web UI; the hub decides an item left open past
``expires_at`` according to ``on_expiry``. Every change appends a feed event
(``question.posted``/``answered``, ``approval.requested``/``decided``) in the same transaction,
and the item's ``seq`` is the id of that event, so ``inbox_read``'s ``since`` is a feed position.
``resolved_event_id`` is what the attention cursor of the notifications trailer walks.

Every function takes the caller's session and raises :class:`~switchboard.errors.NotFound`
(unknown or foreign ids, the same answer), :class:`~switchboard.errors.InvalidArgument` or
:class:`~switchboard.errors.Conflict` (already resolved).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from switchboard import paging
from switchboard.clock import Clock, iso
from switchboard.errors import Conflict, InvalidArgument, NotFound
from switchboard.feed import events as feed
from switchboard.inbox import effects
from switchboard.intake.channel_break import breaks_channel
from switchboard.models import Agent, Human, InboxItem, Project, fixed_limit
from switchboard.scope import resolve_projects
from switchboard.text import readable

MAX_TITLE_CHARS = 300
MAX_BODY_CHARS = 20_000
MAX_ANSWER_CHARS = 20_000
MAX_OPTIONS = 20
MAX_EXPIRES_SECONDS = 30 * 86_400
MAX_READ_LIMIT = 200
DECISIONS = ("approve", "deny")
DECIDED = {"approve": "approved", "deny": "denied"}  # in titles: "Approval denied: ..."
VIAS = ("cli", "rest", "web", "relay", "chat", "expiry", "agent")
READ_STATUSES = ("open", "answered", "decided", "expired", "resolved")
_POSTED = {"question": "question.posted", "approval": "approval.requested"}
_RESOLVED = {"question": "question.answered", "approval": "approval.decided",
             "permission": "permission.decided", "friend": "friend.decided"}
_NOUNS = {"question": "Question", "approval": "Approval", "permission": "Permission prompt",
          "friend": "Friend request"}

def one_line(kind: str, text: str, limit: int) -> str:
    """``text`` with runs of whitespace folded to one space.

    Raises:
        InvalidArgument: empty, longer than ``limit`` characters, or holding a ``<channel>`` tag
            (titles reach other agents' contexts through trailers: DESIGN.md §5).
    """
    line = readable(str(text))  # one line, nothing hidden (bidi, controls): DESIGN.md §5
    if not line or len(line) > limit:
        raise InvalidArgument(f"{kind} must be 1-{limit} characters on one line")
    if breaks_channel(line):
        raise InvalidArgument(f"{kind} must not contain a <channel> tag")
    return line


def post(session: Session, clock: Clock, *, agent_id: str, grants: dict[str, str], kind: str, project: str,
         title: str, body: str | None = None, options: list[str] | None = None,
         expires_in_seconds: int | None = None, on_expiry: str | None = None) -> dict[str, Any]:
    """Create an open question or approval for the agent's human, with its feed event.

    Args:
        kind: ``question`` or ``approval``.
        project: id or name of a project the agent may ``work`` on.
        options: allowed answers of a question (approvals are always approve/deny).
        expires_in_seconds: 1 .. 30 days; unset means the item waits for ever.
        on_expiry: ``expire`` (default for questions), ``approve``/``deny`` (approvals; default
            ``deny``), or one of ``options`` (questions: the hub answers with it).

    Returns:
        The item's public view (:func:`view`).

    Raises:
        NotFound: the project is unknown or not readable. Forbidden: read-only grant.
        InvalidArgument: bad title, body, options or expiry settings.
    """
    if kind not in _POSTED:
        raise ValueError(f"unknown inbox kind {kind!r}")
    project_id = resolve_projects(session, grants, project, need_work=True)[0]
    line = one_line("title", title, MAX_TITLE_CHARS)
    if body is not None and len(body) > MAX_BODY_CHARS:
        raise InvalidArgument(f"body must be at most {MAX_BODY_CHARS} characters")
    if body is not None:  # lines kept; nothing a human cannot see (bidi, escapes): DESIGN.md §5
        body = readable(str(body), multiline=True)
    if options is not None:
        if kind == "approval":
            raise InvalidArgument("an approval's options are always approve and deny; omit options")
        options = [one_line("each option", o, 200) for o in options]
        if not options or len(options) > MAX_OPTIONS or len(set(options)) != len(options):
            raise InvalidArgument(f"options must be 1-{MAX_OPTIONS} distinct strings")
    default = "deny" if kind == "approval" else "expire"
    on_expiry = on_expiry or default
    allowed = ["expire", *DECISIONS] if kind == "approval" else ["expire", *(options or [])]
    if on_expiry not in allowed:
        raise InvalidArgument(f"on_expiry must be one of: {', '.join(allowed)}")
    if expires_in_seconds is not None and not 1 <= expires_in_seconds <= MAX_EXPIRES_SECONDS:
        raise InvalidArgument(f"expires_in_seconds must be 1 to {MAX_EXPIRES_SECONDS}")
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise NotFound("no such agent")
    now = clock.now()
    item = InboxItem(kind=kind, project_id=project_id, agent_id=agent_id, human_id=agent.human_id, title=line,
                     body=body, options=options, on_expiry=on_expiry, created_at=now,
                     expires_at=now + timedelta(seconds=expires_in_seconds) if expires_in_seconds else None)
    session.add(item)
    session.flush()
    label = "Question" if kind == "question" else "Approval requested"
    event = feed.append(session, clock, project_id, _POSTED[kind], f"{label} by {agent.name}: {line}",
                        subject_id=item.id, data={"inbox_item_id": item.id, "agent_id": agent_id})
    item.seq = int(event.id or 0)
    session.flush()
    return view(item)


def resolve(session: Session, clock: Clock, item_id: str, *, via: str, human_id: str | None = None,
            answer: str | None = None, decision: str | None = None, note: str | None = None,
            expired: bool = False) -> tuple[dict[str, Any], str]:
    """Answer a question or decide an approval, once, with who/when/how.

    Args:
        human_id: the deciding human, who must be the item's human (``None`` only for the hub on
            expiry).
        via: one of :data:`VIAS`.

    Returns:
        ``(view, agent_id)``: the item and the agent to notify.

    Raises:
        NotFound: unknown id (or, with ``human_id``, an item of another human).
        Conflict: the item is resolved already. InvalidArgument: wrong operation for the kind,
            an answer outside the options, an unknown decision.
    """
    if via not in VIAS:
        raise ValueError(f"unknown path {via!r}")
    item = session.get(InboxItem, item_id)
    if item is None or (human_id is not None and item.human_id != human_id):
        raise NotFound("no such inbox item")
    if item.status != "open":
        raise Conflict(f"the item is already {item.status}")
    if not effects.installed(item.kind):
        raise RuntimeError(f"no effects installed for {item.kind} items: build a Hub first")
    now = clock.now()
    if expired:
        item.status = "expired"
    elif item.kind == "question":
        if answer is None or decision is not None:
            raise InvalidArgument("a question is answered (answer), not decided")
        answer = answer.strip()
        if not answer or len(answer) > MAX_ANSWER_CHARS:
            raise InvalidArgument(f"answer must be 1-{MAX_ANSWER_CHARS} characters")
        if item.options and answer not in item.options:
            raise InvalidArgument(f"answer must be one of: {', '.join(item.options)}")
        item.status, item.answer = "answered", answer
    else:
        if decision not in DECISIONS or answer is not None:
            raise InvalidArgument(f"{'an approval' if item.kind == 'approval' else 'a ' + item.kind + ' item'} "
                                  "is decided: decision approve or deny")
        item.status, item.decision = "decided", decision
        if item.kind in effects.ON_DECIDED:  # a permission verdict: one event for the relaying session (§6.5a)
            effects.ON_DECIDED[item.kind](session, clock, item)
    if note is not None:
        if len(note) > MAX_ANSWER_CHARS:
            raise InvalidArgument(f"note must be at most {MAX_ANSWER_CHARS} characters")
        item.note = note
    item.resolved_by_human_id, item.resolved_via, item.resolved_at = human_id, via, now
    what = DECIDED[str(item.decision)] if item.status == "decided" else item.status  # answered, expired
    data: dict[str, Any] = {"inbox_item_id": item.id, "agent_id": item.agent_id, "status": item.status,
                            "decision": item.decision, "via": via}
    if item.kind == "permission":
        data["request_id"] = item.request_id
    event = feed.append(session, clock, item.project_id, _RESOLVED[item.kind],
                        f"{_NOUNS[item.kind]} {what}: {item.title}", subject_id=item.id, data=data)
    item.resolved_event_id = item.seq = int(event.id or 0)
    session.flush()
    if item.kind in effects.AFTER_RESOLVED:  # an approved friend request becomes a friendship
        effects.AFTER_RESOLVED[item.kind](session, clock, item)
    return view(item), item.agent_id


def _past_expiry(clock: Clock) -> tuple[Any, ...]:
    return InboxItem.status == "open", InboxItem.expires_at <= clock.now()  # type: ignore[operator]


def expiry_due(session: Session, clock: Clock) -> bool:
    """Whether :func:`expire_due` has an item to decide (one indexed read of one row at most, in
    any session; the maintenance pass asks first, in a read: issue 11)."""
    return session.execute(select(InboxItem.id).where(*_past_expiry(clock)).limit(fixed_limit(1))).first() is not None


def expire_due(session: Session, clock: Clock, limit: int = 500) -> list[str]:
    """Decide open items past ``expires_at`` by their ``on_expiry`` (the hub's maintenance loop).

    Returns:
        The agent ids whose items were resolved (to ring their ``inbox_wait``).
    """
    due = session.execute(
        select(InboxItem).where(*_past_expiry(clock)).order_by(InboxItem.expires_at).limit(fixed_limit(limit))
    ).scalars().all()
    agents: list[str] = []
    for item in due:
        if item.on_expiry == "expire":
            resolve(session, clock, item.id, via="expiry", expired=True, note="expired unanswered")
        elif item.kind == "approval":
            resolve(session, clock, item.id, via="expiry", decision=item.on_expiry, note="decided by the hub on expiry")
        else:
            resolve(session, clock, item.id, via="expiry", answer=item.on_expiry,
                    note="answered by the hub on expiry")
        agents.append(item.agent_id)
    return agents


INBOX_LIST = "inbox"
HUMAN_INBOX_LIST = "human_inbox"
_SEQ_KEY = ("int",)
_CREATED_KEY = ("time", "str")


def read(session: Session, agent_id: str, *, status: str | None = None, since: int | None = None,
         limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
    """The agent's own items changed after feed position ``since``, oldest change first.

    Args:
        cursor: ``next_cursor`` of an earlier page, the same position as ``since`` in the
            opaque form every list shares (:mod:`switchboard.paging`); never both.

    Returns:
        ``{items, next_since, next_cursor, has_more}``; ``next_since`` is the last item's
        ``seq`` (or ``since`` when the page is empty) and ``next_cursor`` the same position
        (in every page: the inbox is read as a log of changes).

    Raises:
        InvalidArgument: ``limit`` outside 1..200, an unknown ``status``, a malformed cursor,
            both ``since`` and ``cursor``, or a position past every feed id given
            (:func:`switchboard.feed.events.refuse_ahead`).
    """
    if not 1 <= limit <= MAX_READ_LIMIT:
        raise InvalidArgument(f"limit must be 1 to {MAX_READ_LIMIT}")
    if cursor is not None:
        if since is not None:
            raise InvalidArgument("give since or cursor, not both")
        since = int(paging.decode(cursor, INBOX_LIST, _SEQ_KEY)[0])
    feed.refuse_ahead(session, since)
    query = select(InboxItem).where(InboxItem.agent_id == agent_id, InboxItem.seq > (since or 0),
                                    feed.settled(InboxItem.seq, session))
    if status == "resolved":
        query = query.where(InboxItem.status != "open")
    elif status is not None:
        if status not in READ_STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(READ_STATUSES)}")
        query = query.where(InboxItem.status == status)
    rows = session.execute(query.order_by(InboxItem.seq).limit(limit + 1)).scalars().all()
    page = rows[:limit]
    next_since = page[-1].seq if page else (since or 0)
    return {"items": [view(i) for i in page], "next_since": next_since,
            "next_cursor": paging.encode(INBOX_LIST, (next_since,), _SEQ_KEY), "has_more": len(rows) > limit}


def resolved_after(session: Session, agent_id: str, position: int, limit: int = 50) -> list[InboxItem]:
    """The agent's items resolved after ``position`` (attention order), oldest first."""
    return list(session.execute(
        select(InboxItem).where(InboxItem.agent_id == agent_id, InboxItem.resolved_event_id > position,
                                feed.settled(InboxItem.resolved_event_id, session))
        .order_by(InboxItem.resolved_event_id).limit(limit)
    ).scalars())


def list_for_human(session: Session, *, human_id: str | None = None, status: str | None = "open",
                   limit: int = 100, cursor: str | None = None) -> list[dict[str, Any]]:
    """Items waiting on a human (all humans when ``human_id`` is None), oldest first.

    Args:
        limit: at most this many items.
        cursor: list only items after this position (:func:`page_for_human`).

    Raises:
        InvalidArgument: a malformed cursor.
    """
    return page_for_human(session, human_id=human_id, status=status, limit=limit, cursor=cursor)["items"]


def page_for_human(session: Session, *, human_id: str | None = None, status: str | None = "open",
                   limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
    """One page of the items waiting on a human, oldest first (``created_at``, then id).

    Keyset paging on the immutable creation time and id (:mod:`switchboard.paging`), so an item
    answered or added between pages never makes another one skipped or repeated.

    Returns:
        ``{items, has_more, next_cursor}`` (``next_cursor`` None on the last page).

    Raises:
        InvalidArgument: a malformed cursor.
    """
    query = select(InboxItem)
    if human_id is not None:
        query = query.where(InboxItem.human_id == human_id)
    if status is not None:
        query = query.where(InboxItem.status == status)
    if cursor is not None:
        query = query.where(paging.after((InboxItem.created_at, InboxItem.id),
                                         paging.decode(cursor, HUMAN_INBOX_LIST, _CREATED_KEY)))
    fetched = session.execute(query.order_by(InboxItem.created_at, InboxItem.id).limit(limit + 1)).scalars().all()
    rows, next_cursor = paging.page(fetched, limit, HUMAN_INBOX_LIST, _CREATED_KEY, lambda i: (i.created_at, i.id))
    agents = dict(session.execute(select(Agent.id, Agent.name).where(
        Agent.id.in_({i.agent_id for i in rows}))).all())  # type: ignore[attr-defined]
    humans = dict(session.execute(select(Human.id, Human.name).where(
        Human.id.in_({i.human_id for i in rows}))).all())  # type: ignore[attr-defined]
    projects = dict(session.execute(select(Project.id, Project.name).where(
        Project.id.in_({i.project_id for i in rows}))).all())  # type: ignore[attr-defined]
    out = []
    for item in rows:
        v = view(item, projects.get(item.project_id))
        v.setdefault("project", None)  # permission prompts and friend requests have none
        v["agent"] = agents.get(item.agent_id)
        v["human"] = humans.get(item.human_id)
        out.append(v)
    return {"items": out, "has_more": next_cursor is not None, "next_cursor": next_cursor}


def view(item: InboxItem, project_name: str | None = None) -> dict[str, Any]:
    """The public shape of an item (DESIGN.md §6.3): the answer or decision with who/when/how."""
    out: dict[str, Any] = {
        "id": item.id, "kind": item.kind, "project_id": item.project_id, "title": item.title,
        "body": item.body, "options": item.options, "status": item.status, "answer": item.answer,
        "decision": item.decision, "note": item.note, "expires_at": iso(item.expires_at),
        "on_expiry": item.on_expiry,
        "resolved_by": ({"human_id": item.resolved_by_human_id} if item.resolved_by_human_id
                        else ("hub" if item.resolved_at else None)),
        "resolved_via": item.resolved_via, "resolved_at": iso(item.resolved_at),
        "created_at": iso(item.created_at), "seq": item.seq,
    }
    if item.kind == "permission":
        out.update({"request_id": item.request_id, "tool_name": item.tool_name,
                    "input_preview": item.input_preview, "verdict": _verdict_text(item)})
    elif item.kind == "friend":
        out["friend_request_id"] = item.subject_id
    if item.kind in ("permission", "friend"):
        out["used_at"] = iso(item.used_at)
    if project_name is not None:
        out["project"] = project_name
    return out


def _verdict_text(item: InboxItem) -> str | None:
    """Where a permission item's verdict stands (DESIGN.md §6.5a): the item says when its
    session is gone, and nothing is sent anywhere else."""
    return {None: None, "sent": "sent to the relaying session",
            "queued": "queued for the relaying session, which was not attached: it gets it if it re-attaches",
            "session_gone": "not sent: the relaying session ended"}.get(item.verdict_state, item.verdict_state)
