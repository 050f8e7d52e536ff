"""Telling a human that a permission prompt waits: an optional Apprise URL per human (DESIGN.md §6.5).

``switchboard human notify NAME --url APPRISE_URL`` stores the URL sealed at rest (it usually
embeds a token: :class:`~switchboard.models.NotifyTarget`); ``--off`` removes it. Each new prompt
sends ``agent a1 asks to run Bash: <description>. Reply `yes abcde` or `no abcde`.``: only the
screened description, never tool input or payload values. Bursts are coalesced: at most one
message per human per ``notify_coalesce_seconds``; prompts inside the window go out as one
summary when it closes (the maintenance pass). Sending happens in a background thread after the
commit; a failed send is logged (without the URL) and loses nothing: the item is in the inbox.

Apprise (https://github.com/caronc/apprise) speaks ~100 services by URL scheme (``slack://``,
``tgram://``, ``mailto://``, ``ntfy://``, ``json://`` for any HTTP endpoint, ...).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
from switchboard.models import NotifyTarget, fixed_limit

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)
# Apprise's own log lines quote the URL, which usually holds a token (DESIGN.md §5: no secret in
# logs): only its critical lines pass; failures are logged here without the URL.
logging.getLogger("apprise").setLevel(logging.CRITICAL)
MAX_URL_CHARS = 2_000
MAX_DESCRIPTION_CHARS = 300
TITLE = "Switchboard: a permission prompt waits"


def check_url(url: str) -> str:
    """An Apprise URL Apprise understands.

    Raises:
        InvalidArgument: empty, too long, or no Apprise plugin accepts it (the message never
            repeats the URL: it may hold a token).
    """
    import apprise

    url = (url or "").strip()
    if not url or len(url) > MAX_URL_CHARS or not apprise.Apprise().add(url):
        raise InvalidArgument("not an Apprise URL Switchboard can use (see https://github.com/caronc/apprise/wiki)")
    return url


def set_target(session: Session, clock: Clock, human_id: str, url: str | None) -> dict[str, Any]:
    """Set (``url``) or remove (``None``) a human's notification URL.

    Returns:
        ``{"human_id", "notify": True|False}``.
    """
    target = session.get(NotifyTarget, human_id)
    if url is None:
        if target is not None:
            session.delete(target)
        return {"human_id": human_id, "notify": False}
    url = check_url(url)
    if target is None:
        session.add(NotifyTarget(human_id=human_id, url=url.encode(), created_at=clock.now()))
    else:
        target.url, target.pending, target.pending_text = url.encode(), 0, None
    return {"human_id": human_id, "notify": True}


def prompt_text(agent: str, tool: str, description: str | None, request_id: str) -> str:
    """The notification for one prompt, from screened fields only."""
    desc = " ".join((description or "").split())
    if len(desc) > MAX_DESCRIPTION_CHARS:
        desc = desc[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return (f"agent {agent} asks to run {tool}{': ' + desc if desc else ''}. "
            f"Reply `yes {request_id}` or `no {request_id}`.")


def queue_prompt(session: Session, clock: Clock, human_id: str, text: str,
                 coalesce_seconds: int) -> list[tuple[str, str]]:
    """Record a prompt for ``human_id``; return what to send now (``[(url, text)]``, maybe empty).

    Inside the coalescing window the prompt is counted, and :func:`due` sends the summary.
    """
    target = session.get(NotifyTarget, human_id)
    if target is None:
        return []
    now = clock.now()
    if target.last_sent_at is not None and now - target.last_sent_at < timedelta(seconds=coalesce_seconds):
        target.pending, target.pending_text = target.pending + 1, text
        return []
    target.last_sent_at = now
    return [(bytes(target.url).decode(), text)]


def due(session: Session, clock: Clock, coalesce_seconds: int) -> list[tuple[str, str]]:
    """Summaries for humans whose coalescing window closed with prompts counted in it."""
    now = clock.now()
    rows = session.execute(select(NotifyTarget).where(NotifyTarget.pending > 0)).scalars().all()
    out = []
    for target in rows:
        if target.last_sent_at is not None and now - target.last_sent_at < timedelta(seconds=coalesce_seconds):
            continue
        if target.pending == 1:
            text = target.pending_text or "a permission prompt waits in your Switchboard inbox."
        else:
            text = (f"{target.pending} more permission prompts wait in your Switchboard inbox; the latest: "
                    f"{target.pending_text or ''}")
        # Conditional: with several ``serve`` processes only one sends the summary.
        taken = session.execute(update(NotifyTarget).where(
            NotifyTarget.human_id == target.human_id, NotifyTarget.pending == target.pending,
            NotifyTarget.last_sent_at == target.last_sent_at)
            .values(pending=0, pending_text=None, last_sent_at=now).execution_options(synchronize_session=False))
        if taken.rowcount == 1:  # type: ignore[attr-defined]
            out.append((bytes(target.url).decode(), text))
    return out


def send(messages: list[tuple[str, str]]) -> threading.Thread | None:
    """Send ``[(url, text)]`` through Apprise in a background thread (returned, for tests to join)."""
    if not messages:
        return None

    def run() -> None:
        import apprise

        for url, text in messages:
            box = apprise.Apprise()
            try:
                ok = box.add(url) and box.notify(body=text, title=TITLE)
            except Exception as exc:  # noqa: BLE001 - a notification is a nudge; the inbox keeps the item
                log.warning("prompt notification failed (%s)", type(exc).__name__)
                continue
            if not ok:
                log.warning("prompt notification was not accepted by its service")

    thread = threading.Thread(target=run, name="switchboard-notify", daemon=True)
    thread.start()
    return thread


def send_due(hub: Hub) -> threading.Thread | None:
    """The maintenance pass: send the coalesced summaries that are due (a read first; no write
    lock when nothing is pending)."""
    with hub.db.read() as s:
        if s.execute(select(NotifyTarget.human_id).where(NotifyTarget.pending > 0).limit(fixed_limit(1))).first() is None:
            return None
    with hub.db.write() as s:
        messages = due(s, hub.clock, hub.settings.notify_coalesce_seconds)
    return send(messages)
