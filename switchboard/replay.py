"""``switchboard delivery replay``: a stored delivery through processing again (issue 14).

Not a re-POST: the stored (sealed) raw body is processed again by the same job, in this
process. Idempotent by the delivery's origin keys (``delivery:<id>`` for its todo,
``<id>:received`` and friends for its feed events, DESIGN.md §2): a replay of a processed
delivery finds its todo and events and makes nothing twice. Meant for deliveries that
``failed`` (processing crashed) or were processed before a fix (a newly linked identity, a
new trust list, a corrected adapter).

A replay needs the raw body: rejected deliveries (channel break) and malformed ones keep none
(DESIGN.md §2, §5), and settled deliveries lose theirs after ``SWITCHBOARD_RAW_BODY_DAYS``.
Quarantined deliveries go through ``quarantine release`` instead (it checks attribution).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import update

from switchboard.errors import Conflict, NotFound
from switchboard.models import Delivery

if TYPE_CHECKING:
    from switchboard.hub import Hub

REPLAYABLE = ("processed", "failed", "rejected")


def replay(hub: Hub, delivery_id: str) -> dict[str, Any]:
    """Reset a settled delivery to ``received`` and process it again, here and now.

    Returns:
        ``{id, status, todo_id, todo_created}``: the new status, its todo (if any) and whether
        the todo is new (``False`` when the replay found the one made before).

    Raises:
        NotFound: no such delivery.
        Conflict: quarantined, still waiting for processing, or its raw body is gone.
    """
    from switchboard.queue.jobs import process_delivery

    with hub.db.write() as s:
        delivery = s.get(Delivery, delivery_id) if delivery_id.startswith("dlv_") else None
        if delivery is None:
            raise NotFound("no such delivery")
        if delivery.status == "quarantined":
            raise Conflict(f"delivery {delivery.id} is quarantined: use `switchboard quarantine release`")
        if delivery.status not in REPLAYABLE:
            raise Conflict(f"delivery {delivery.id} is {delivery.status}; only {', '.join(REPLAYABLE)} "
                           "deliveries are replayed")
        if delivery.raw_body is None:
            why = ("a rejected or malformed delivery keeps no body" if delivery.status != "processed"
                   else f"bodies are kept {hub.settings.raw_body_days} days (SWITCHBOARD_RAW_BODY_DAYS)")
            raise Conflict(f"delivery {delivery.id} has no stored body to replay ({why}); "
                           "ask the provider to redeliver it")
        todo_before = delivery.todo_id
        changed = s.execute(
            update(Delivery).where(Delivery.id == delivery.id, Delivery.status == delivery.status)
            .values(status="received", error_code=None, error_detail=None, process_failures=0)
            .execution_options(synchronize_session=False)).rowcount
        if changed != 1:
            raise Conflict(f"delivery {delivery.id} changed while replaying; try again")
    status = process_delivery(hub, delivery_id)
    with hub.db.read() as s:
        after = s.get(Delivery, delivery_id)
        todo_id = after.todo_id if after else None
    return {"id": delivery_id, "status": status or (after.status if after else None), "todo_id": todo_id,
            "todo_created": todo_id is not None and todo_id != todo_before}
