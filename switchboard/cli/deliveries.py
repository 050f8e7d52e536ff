"""``switchboard quarantine|delivery``: what sources received, held or replayed."""

from __future__ import annotations

from typing import Any

import click

from switchboard import admin as admin_ops
from switchboard.cli.base import admin, cursor_option, main, open_hub, with_more


@main.group()
def quarantine() -> None:
    """Quarantined deliveries: unknown, bot or untrusted senders, waiting for a human."""


@quarantine.command("list")
@click.option("--project", "project_name", default=None)
@click.option("--limit", default=100, type=click.IntRange(1, 1000), show_default=True)
@cursor_option
@admin
def quarantine_list(project_name: str | None, limit: int, cursor: str | None) -> tuple[dict[str, Any], str]:
    """List quarantined deliveries with the sender to link, oldest first (one page)."""
    from switchboard.intake import quarantine as q

    with open_hub().db.read() as s:
        project_id = admin_ops.project_by_name(s, project_name).id if project_name else None
        page = q.page_quarantined(s, None if project_id is None else [project_id], limit=limit, cursor=cursor)
    rows = page["deliveries"]
    lines = []
    for r in rows:
        who = r["sender"]
        sender = "no sender" if who is None else (
            f"{who['provider']} {(who['workspace'] + ':') if who['workspace'] else ''}{who['external_id']}"
            f"{' (' + who['login'] + ')' if who['login'] else ''}")
        reason = r["reason"] if r.get("reason_now") == r["reason"] else (
            f"{r['reason']} (now {r['reason_now']})" if r.get("reason_now")
            else f"{r['reason']} (sender now linked and trusted: release it)")
        lines.append(f"{r['id']}  {reason}  {r['event']}  {sender}  {r['received_at']}")
    return page, with_more("\n".join(lines) or "nothing quarantined", page)


@quarantine.command("release")
@click.argument("delivery_id")
@click.option("--as", "as_human", default=None,
              help="A human who answers for a sender that is still not attributable (e.g. a bot).")
@admin
def quarantine_release(delivery_id: str, as_human: str | None) -> tuple[dict[str, Any], str]:
    """Process a quarantined delivery again, once, with the now-linked identity."""
    from switchboard.intake import quarantine as q
    from switchboard.queue.jobs import process_delivery

    hub = open_hub()
    with hub.db.write() as s:
        human_id = admin_ops.human_by_name(s, as_human).id if as_human else None
        q.release(s, hub.clock, delivery_id, human_id)
    status = process_delivery(hub, delivery_id)
    with hub.db.read() as s:
        from switchboard.models import Delivery

        d = s.get(Delivery, delivery_id)
        todo_id = d.todo_id if d else None
        # A running hub's sweeper may have processed it first (process_delivery then had nothing
        # to do): report what happened to it either way.
        status = d.status if d else status
    return ({"id": delivery_id, "status": status, "todo_id": todo_id},
            f"delivery {delivery_id}: {status}" + (f", todo {todo_id}" if todo_id else ""))


@quarantine.command("discard")
@click.argument("delivery_id")
@admin
def quarantine_discard(delivery_id: str) -> tuple[dict[str, Any], str]:
    """Discard a quarantined delivery (its body is dropped)."""
    from switchboard.intake import quarantine as q

    hub = open_hub()
    with hub.db.write() as s:
        q.discard(s, hub.clock, delivery_id)
    return {"id": delivery_id, "status": "discarded"}, f"delivery {delivery_id}: discarded"


@main.group()
def delivery() -> None:
    """Deliveries: what each source received, and the verdict."""


@delivery.command("list")
@click.option("--status", type=click.Choice(["received", "processed", "quarantined", "rejected", "failed"]),
              default=None)
@click.option("--source", "source_id", default=None)
@click.option("--limit", default=50, type=click.IntRange(1, 1000), show_default=True)
@cursor_option
@admin
def delivery_list(status: str | None, source_id: str | None, limit: int,
                  cursor: str | None) -> tuple[dict[str, Any], str]:
    """List deliveries, newest first (no bodies), one page; --cursor continues to older ones.

    Keyset paging on (received_at, id) descending (:mod:`switchboard.paging`): deliveries that
    arrive between pages go before the first page and never shift the ones after the cursor.
    """
    from sqlalchemy import select

    from switchboard import paging
    from switchboard.models import Delivery

    hub = open_hub()
    key = ("time", "str")
    query = select(Delivery)
    if cursor is not None:
        query = query.where(paging.after((Delivery.received_at, Delivery.id),
                                         paging.decode(cursor, "deliveries", key), descending=True))
    if status:
        query = query.where(Delivery.status == status)
    if source_id:
        query = query.where(Delivery.source_id == source_id)
    query = query.order_by(Delivery.received_at.desc(), Delivery.id.desc())  # type: ignore[attr-defined,union-attr]
    with hub.db.read() as s:
        rows, next_cursor = paging.page(s.execute(query.limit(limit + 1)).scalars().all(), limit, "deliveries",
                                        key, lambda d: (d.received_at, d.id))
    data = [{"id": d.id, "source_id": d.source_id, "status": d.status, "event": d.event,
             "received_at": d.received_at.isoformat(), "todo_id": d.todo_id,
             "reason": d.quarantine_reason or d.error_code, "detail": d.error_detail} for d in rows]
    width = max((len(d["id"]) for d in data), default=0)  # older ids are shorter (new_ordered_id)
    text = "\n".join(f"{d['id']:<{width}} {d['received_at'][:19]} {d['status']:<11} {d['event'] or '-'}"
                     + (f" -> {d['todo_id']}" if d["todo_id"] else "")
                     + (f" ({d['reason']}{': ' + d['detail'] if d['detail'] else ''})" if d["reason"] else "")
                     for d in data)
    page = {"deliveries": data, "has_more": next_cursor is not None, "next_cursor": next_cursor}
    return page, with_more(text or "no deliveries", page)


@delivery.command("replay")
@click.argument("delivery_id")
@admin
def delivery_replay(delivery_id: str) -> tuple[dict[str, Any], str]:
    """Process a stored delivery again (failed, or processed before a fix); makes nothing twice."""
    from switchboard.replay import replay

    hub = open_hub()
    try:
        data = replay(hub, delivery_id)
    finally:
        hub.close()
    todo_text = ""
    if data["todo_id"]:
        todo_text = f", todo {data['todo_id']}" + (" (new)" if data["todo_created"] else " (existing)")
    return data, f"delivery {delivery_id}: {data['status']}{todo_text}"
