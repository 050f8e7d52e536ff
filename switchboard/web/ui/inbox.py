"""``/ui/inbox``: what waits on the signed-in human (issue 15, item 2): questions, approvals,
permission prompts relayed from Claude Code and friend requests.

Answers and decisions go through :func:`switchboard.inbox.items.resolve` with ``via="web"``,
the function the CLI and REST call, which refuses another human's item as ``not_found`` and a
resolved one as ``conflict`` (so a prompt decided elsewhere first, by chat or REST, is refused
here and the page shows who decided it and how). It writes a permission prompt's verdict for
the relaying adapter session and approves or declines a friend request in the same
transaction; then :meth:`switchboard.hub.Hub.after_decision` rings the agent, as REST does.

Permission texts (tool, description, input preview) come from Claude Code and were screened at
relay time; they are shown as text, never as markup.
"""

from __future__ import annotations

from typing import Any

from flask import flash, g, redirect, render_template, request, url_for
from sqlalchemy import select

from switchboard.errors import InvalidArgument
from switchboard.inbox import items as inbox_ops
from switchboard.models import Agent, FriendRequest, Human, InboxItem, Project
from switchboard.web.ui.base import bp, hub, write_session

RECENT = 20


@bp.get("/inbox")
def inbox_page() -> Any:
    """Open items first (oldest first), then the latest resolved ones with who decided and how."""
    with hub().db.read() as s:
        open_items = inbox_ops.list_for_human(s, human_id=g.human.id, status="open")
        _add_friend_requests(s, open_items)
        rows = s.execute(select(InboxItem, Agent.name, Project.name, Human.name)
                         .join(Agent, Agent.id == InboxItem.agent_id)
                         .outerjoin(Project, Project.id == InboxItem.project_id)
                         .outerjoin(Human, Human.id == InboxItem.resolved_by_human_id)
                         .where(InboxItem.human_id == g.human.id, InboxItem.status != "open")
                         .order_by(InboxItem.resolved_at.desc()).limit(RECENT)).all()  # type: ignore[union-attr]
    resolved = []
    for item, agent, project, decider in rows:
        view = inbox_ops.view(item, project)
        view["agent"], view["decider"] = agent, decider or "the hub"
        resolved.append(view)
    return render_template("ui/inbox.html", open_items=open_items, resolved=resolved, page="inbox")


def _add_friend_requests(s: Any, items: list[dict[str, Any]]) -> None:
    """Give each friend item its request: asker (agent and human), target agent, queues, reason."""
    from switchboard.friends.requests import request_view

    for item in items:
        if item["kind"] != "friend" or not item.get("friend_request_id"):
            continue
        fr = s.get(FriendRequest, item["friend_request_id"])
        if fr is not None:
            item["friend"] = request_view(s, fr)
            item["friend"]["from_human"] = s.execute(select(Human.name).where(Human.id == fr.from_human_id)).scalar()


def _resolve(item_id: str, **kwargs: Any) -> Any:
    with write_session() as s:
        view, agent_id = inbox_ops.resolve(s, hub().clock, item_id, via="web", human_id=g.human.id, **kwargs)
    hub().after_decision(agent_id)  # rings inbox_wait; a permission verdict goes to its session now
    flash(f"{view['title']}: {view['answer'] or view['decision']}"
          + (f" ({view['verdict']})" if view.get("verdict") else ""))
    return redirect(url_for("ui.inbox_page"), code=303)


@bp.post("/inbox/<item_id>/answer")
def inbox_answer(item_id: str) -> Any:
    """Answer a question: the chosen option (``answer``) or free text (``text``)."""
    answer = request.form.get("answer") or request.form.get("text") or ""
    if not answer.strip():
        raise InvalidArgument("choose an option or write an answer")
    return _resolve(item_id, answer=answer)


@bp.post("/inbox/<item_id>/decide")
def inbox_decide(item_id: str) -> Any:
    """Approve or deny an approval, a permission prompt (approve = allow) or a friend request,
    with an optional note for the agent."""
    note = (request.form.get("note") or "").strip() or None
    return _resolve(item_id, decision=request.form.get("decision"), note=note)
