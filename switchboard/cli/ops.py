"""``switchboard init|migrate|prune|backup|doctor``: operating an instance (issue 14)."""

from __future__ import annotations

import sys
from typing import Any

import click

from switchboard import admin as admin_ops
from switchboard.cli.base import admin, clear_errors, emit, load_settings, main, open_hub


@main.command()
@admin
def init() -> tuple[dict[str, Any], str]:
    """Create the instance folder and apply database migrations."""
    hub = open_hub(migrate=True)
    s = hub.settings
    safe_url = s.database_url.split("@")[-1] if "@" in s.database_url else s.database_url
    return {"home": str(s.home), "database": safe_url}, f"initialised {safe_url}"


@main.command("migrate")
@click.option("--to", "target", metavar="REVISION", default=None,
              help="Move the schema to this revision instead of the newest: an older one before "
                   "running an earlier release (rolling back), the newest by default.")
@click.option("--yes", is_flag=True,
              help="Confirm moving the schema down: the later migrations' downgrades drop what they "
                   "added, data included (SQLite: a copy of the database is written beside it first).")
@admin
def migrate_cmd(target: str | None, yes: bool) -> tuple[dict[str, Any], str]:
    """Apply database migrations up to this version's head (safe while serving), or move the
    schema back with --to (and --yes) before rolling back to an earlier release."""
    from switchboard.db import upgrade
    from switchboard.schema import current_revision, head_revision, migrate_to

    settings = load_settings()
    copy = None
    if target is None or target == head_revision():
        from switchboard.instance import hold_running_lock

        hold_running_lock(settings)  # waits for a `migrate --to` under way (instance.py)
        before = current_revision(settings)
        upgrade(settings)
        after = head_revision()
    else:
        (before, copy), after = migrate_to(settings, target, confirmed=yes), target
    text = f"schema at {after}" + (f" (was {before})" if before != after else " (already)")
    if copy is not None:
        text += f"; the database as it was at {before} is copied to {copy}"
    return {"before": before, "revision": after, "copy": copy}, text


@main.command("prune")
@click.option("--dry-run", is_flag=True, help="Only count what would be dropped.")
@admin
def prune_cmd(dry_run: bool) -> tuple[dict[str, Any], str]:
    """Drop raw bodies older than SWITCHBOARD_RAW_BODY_DAYS and deliveries and feed events older
    than SWITCHBOARD_RETENTION_DAYS (serve does this hourly)."""
    from switchboard.retention import prune

    hub = open_hub()
    try:
        report = prune(hub, dry_run=dry_run)
    finally:
        hub.close()
    verb = "would drop" if dry_run else "dropped"
    return report.to_dict(), (f"{verb} {report.raw_bodies} raw bodies (before {report.body_cutoff:%Y-%m-%d}), "
                              f"{report.deliveries} deliveries and {report.feed_events} feed events "
                              f"(before {report.row_cutoff:%Y-%m-%d})")


@main.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@admin
def backup_cmd(path: str) -> tuple[dict[str, Any], str]:
    """Copy the SQLite database to PATH while serving (PostgreSQL: prints the pg_dump command)."""
    from pathlib import Path

    from switchboard.backup import backup

    settings = load_settings()
    if settings.is_sqlite:
        from switchboard.schema import require_at_head

        require_at_head(settings)
    done = backup(settings, Path(path))
    keys = (f"{settings.home / 'vault.keys'}" if not settings.vault_keys else "SWITCHBOARD_VAULT_KEYS")
    text = (f"backed up to {done['path']} ({done['bytes']} bytes); the vault key ring is not in it: "
            f"keep {keys} safe as well")
    return {**done, "vault_keys": keys}, text


@main.command()
@click.argument("agent_name", metavar="AGENT")
@click.option("--wait", "wait_seconds", default=20.0, show_default=True, type=click.FloatRange(0, 600),
              help="Seconds to wait for the agent to acknowledge the test wake.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def doctor(agent_name: str, wait_seconds: float, as_json: bool) -> None:
    """Ring AGENT's doorbell: does a wake reach its model? (DESIGN.md §6.5)

    Sends a test wake to every attached session of AGENT (the running ``serve`` process
    forwards it within a few seconds) and waits for the model to call ``doorbell_ack``. Prints
    heard, unheard (attached, but Claude Code drops the wakes: channels not enabled for this
    server) or no_session, with the fix; exits 0 only for heard.
    """
    import time

    from switchboard.notify import doorbell
    from switchboard.notify.wakes import waiting_for

    with clear_errors(as_json):
        hub = open_hub()
        try:
            with hub.db.write() as s:
                agent = admin_ops.agent_by_name(s, agent_name)
                rung = doorbell.ring(s, hub.clock, agent.id)
                _, waiting = waiting_for(s, agent.id)
            verdict = "no_session"
            if rung["sessions"]:
                deadline = time.monotonic() + wait_seconds
                while True:
                    with hub.db.read() as s:
                        verdict = doorbell.verdict(s, agent.id, rung["ring_id"])
                    if verdict == "heard" or time.monotonic() >= deadline:
                        break
                    time.sleep(0.2)
        finally:
            hub.close()
    fix = doorbell.VERDICTS[verdict]
    hub_up = _hub_answers(hub.settings.public_url) if verdict == "no_session" else True
    if not hub_up:  # the first thing to rule out: nothing can attach to a hub that is not running
        fix = (f"first, the hub at {hub.settings.public_url} does not answer: start `switchboard serve` (or set "
               f"SWITCHBOARD_PUBLIC_URL to where it runs); adapters attach within seconds of it starting. {fix}")
    data = {"agent": agent_name, "ring_id": rung["ring_id"], "sessions": rung["sessions"], "verdict": verdict,
            "fix": fix, "waiting_todos": waiting, "hub_answers": hub_up}
    emit(as_json, data, f"{verdict}: {rung['sessions']} session(s) attached; {waiting} todo(s) waiting.\n{fix}")
    sys.exit(0 if verdict == "heard" else 1)


def _hub_answers(public_url: str) -> bool:
    """Whether ``GET {public_url}/api/v1/health`` answers 200 within 2 seconds."""
    import httpx2

    try:
        return httpx2.get(f"{public_url.rstrip('/')}/api/v1/health", timeout=2.0).status_code == 200
    except httpx2.HTTPError:
        return False
