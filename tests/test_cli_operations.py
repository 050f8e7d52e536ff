"""Operations from the CLI (issue 14): no-instance and at-head checks, migrate, source show with
refusal counts, prune, delivery replay, backup, and the newcomer fixes (todo assignment in text,
quarantine list after linking, token help, serve printing the real URLs)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest

from switchboard.schema import head_revision
from tests.conftest import (
    CASES,
    GITHUB_SENDER_ID,
    LiveApp,
    cli,
    cli_env,
    free_port,
    github_headers,
    start_serve,
    stop,
    switchboard_exe,
    wait_for,
)

ISSUE = json.loads((CASES / "github" / "issues.opened.json").read_bytes())


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``switchboard <args>`` in text mode."""
    return subprocess.run([switchboard_exe(), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def fails(env: dict[str, str], *args: str, code: int = 2) -> dict[str, str]:
    proc = subprocess.run([switchboard_exe(), *args, "--json"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == code, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["error"]


def _issue(number: int = 1, sender: str = GITHUB_SENDER_ID) -> bytes:
    data = json.loads(json.dumps(ISSUE))
    data["issue"]["number"] = number
    data["sender"]["id"] = int(sender)
    return json.dumps(data).encode()


def _db(live: LiveApp) -> Path:
    return Path(live.hub.settings.database_url.split("///", 1)[1])


def _sql(db: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = cli_env(tmp_path / "inst")
    cli(env, "init")
    cli(env, "human", "add", "alice")
    cli(env, "project", "add", "acme", "--owner", "alice")
    return env


# --- no instance, at-head check, migrate ---------------------------------------------------------------

@pytest.mark.parametrize("args", [("todo", "list"), ("human", "add", "bob"), ("source", "list"), ("prune",),
                                  ("delivery", "replay", "dlv_x"), ("backup", "copy.db"), ("quarantine", "list")])
def test_commands_other_than_init_fail_where_no_instance_exists(tmp_path: Path, args: tuple[str, ...]) -> None:
    env = cli_env(tmp_path / "instance")
    proc = subprocess.run([switchboard_exe(), *args], env=env, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error no_instance: ")
    assert "`switchboard init`" in proc.stderr and "SWITCHBOARD_HOME" in proc.stderr
    assert "no todos" not in proc.stdout
    assert not (tmp_path / "instance").exists() and not (tmp_path / "copy.db").exists()


def test_a_database_url_to_a_missing_file_is_named_by_its_path(tmp_path: Path) -> None:
    # A new-user run: "no Switchboard instance at <home>" named a folder that existed.
    (tmp_path / "instance").mkdir()
    missing = tmp_path / "nowhere" / "x.db"
    env = cli_env(tmp_path / "instance", SWITCHBOARD_DATABASE_URL=f"sqlite:///{missing}")
    proc = subprocess.run([switchboard_exe(), "todo", "list"], env=env, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error no_instance: no Switchboard database at {missing} "
                                  "(SWITCHBOARD_DATABASE_URL): check the path"), proc.stderr
    assert not missing.parent.exists()


def test_a_schema_behind_needs_migrate_and_migrate_brings_it_to_head(env: dict[str, str]) -> None:
    db = Path(env["SWITCHBOARD_HOME"]) / "switchboard.db"
    _sql(db, "update alembic_version set version_num = '0005'")
    err = fails(env, "todo", "list")
    assert err["code"] == "migration_needed" and "switchboard migrate" in err["message"]
    assert head_revision() in err["message"]
    _sql(db, "update alembic_version set version_num = ?", head_revision())
    out = cli(env, "migrate")
    assert out == {"before": head_revision(), "revision": head_revision(), "copy": None}
    assert cli(env, "todo", "list") == {"todos": [], "has_more": False, "next_cursor": None}


def test_a_schema_a_newer_version_migrated_is_refused_with_how_to_go_back(env: dict[str, str]) -> None:
    """Rolling a release back after `switchboard migrate` (migration 0024 is the case at hand):
    Alembic only said "Can't locate revision identified by '0099'" with a traceback from
    `migrate`, `serve` and `worker`, and the other commands told the operator to run `migrate`."""
    db = Path(env["SWITCHBOARD_HOME"]) / "switchboard.db"
    _sql(db, "update alembic_version set version_num = '0099'")
    for args in (("todo", "list"), ("migrate",), ("migrate", "--to", head_revision())):
        err = fails(env, *args)
        assert err["code"] == "schema_ahead", err
        assert err["message"] == (f"the database is at revision 0099, which this version does not know (its newest "
                                  f"is {head_revision()}): a newer Switchboard migrated it. Run that version, or move "
                                  f"the schema back with it first: `switchboard migrate --to {head_revision()} --yes`")
    proc = subprocess.run([switchboard_exe(), "serve", "--port", str(free_port())], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error schema_ahead: the database is at revision 0099"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert _sql(db, "select version_num from alembic_version") == [("0099",)]  # nothing was changed


def test_migrate_to_moves_the_schema_back_for_an_earlier_release_and_forward_again(env: dict[str, str]) -> None:
    home = Path(env["SWITCHBOARD_HOME"])
    db = home / "switchboard.db"
    index = "select name from sqlite_master where name = 'ix_deliveries_project_id'"
    moved = cli(env, "migrate", "--to", "0023", "--yes")
    assert (moved["before"], moved["revision"]) == (head_revision(), "0023")
    assert _sql(db, "select version_num from alembic_version") == [("0023",)]
    assert _sql(db, index) == [("ix_deliveries_project_id",)]  # 0024's downgrade ran
    assert fails(env, "todo", "list")["code"] == "migration_needed"
    assert cli(env, "migrate", "--to", head_revision()) == {"before": "0023", "revision": head_revision(), "copy": None}
    assert _sql(db, index) == []
    err = fails(env, "migrate", "--to", "0")
    assert (err["code"], err["message"]) == (
        "invalid_argument", f"unknown revision '0': this version's revisions are 0001 to {head_revision()} "
                            "(the four digits that start each file name in migrations/versions)"), err
    assert cli(env, "todo", "list")["todos"] == []


def test_moving_the_schema_down_needs_yes_and_keeps_a_copy_of_what_the_downgrades_drop(env: dict[str, str]) -> None:
    """A new-user run: `migrate --to 0001` then `migrate` answered exit 0 and silently lost every
    project's owner, the inbox and the refusal tallies (the later migrations' downgrades drop their
    tables and columns); one mistyped revision (0001 for 0021) was enough."""
    home = Path(env["SWITCHBOARD_HOME"])
    db = home / "switchboard.db"
    owners = "select count(*) from project_owners"
    assert _sql(db, owners) == [(1,)]
    err = fails(env, "migrate", "--to", "0001")
    head = head_revision()
    assert (err["code"], err["message"]) == (
        "confirmation_required",
        (f"moving the schema down from {head} to 0001 undoes {int(head) - 1} migrations, whose downgrades drop what "
         f"each added (tables and columns, with their data). Run again with --yes: a copy of the database at {head} "
         f"is written first, to {home}/switchboard-at-{head}-<UTC time>.db")), err
    assert _sql(db, "select version_num from alembic_version") == [(head,)]  # nothing changed
    assert list(home.glob("switchboard-at-*")) == []
    moved = cli(env, "migrate", "--to", "0001", "--yes")
    copies = list(home.glob(f"switchboard-at-{head}-*.db"))
    assert len(copies) == 1 and moved == {"before": head, "revision": "0001", "copy": str(copies[0])}
    assert copies[0].stat().st_mode & 0o777 == 0o600
    assert _sql(copies[0], "select version_num from alembic_version") == [(head,)]
    assert _sql(copies[0], owners) == [(1,)]  # what the downgrades dropped is in the copy
    text = run(env, "migrate")
    assert text.returncode == 0 and text.stdout.strip() == f"schema at {head} (was 0001)", text.stdout + text.stderr
    assert _sql(db, owners) == [(0,)]  # the live database lost it, as the refusal said
    one = run(env, "migrate", "--to", "0023", "--yes")
    assert one.returncode == 0, one.stderr
    assert one.stdout.strip().startswith(f"schema at 0023 (was {head}); the database as it was at {head} is "
                                         f"copied to {home}/switchboard-at-{head}-"), one.stdout
    assert fails(env, "migrate", "--to", "0022")["message"].startswith(
        "moving the schema down from 0023 to 0022 undoes 1 migration, whose downgrades drop")


def test_migrate_to_refuses_to_move_the_schema_back_under_a_running_serve(tmp_path: Path,
                                                                         env: dict[str, str]) -> None:
    """A new-user run: `migrate --to 0023` under a running `serve` succeeded, and `serve` went on
    taking deliveries on a schema older than its own (only `/ready` said so)."""
    server = start_serve(env, free_port(), tmp_path / "serve.log")
    try:
        err = fails(env, "migrate", "--to", "0023")
        assert err == {"code": "conflict", "message": f"`switchboard serve` is running for this instance "
                                                      f"({server.url}): stop it, and every `switchboard worker`, "
                                                      "before moving the schema back"}, err
        db = Path(env["SWITCHBOARD_HOME"]) / "switchboard.db"
        assert _sql(db, "select version_num from alembic_version") == [(head_revision(),)]
    finally:
        stop(server.proc)
    assert cli(env, "migrate", "--to", "0023", "--yes")["revision"] == "0023"


def test_migrate_to_sees_a_serve_on_another_address_and_one_still_starting(tmp_path: Path,
                                                                         env: dict[str, str]) -> None:
    """A break run: `serve --host <another address>` wrote a serve.json the CLI would not follow
    (not its SWITCHBOARD_HOST), and a serve still starting had written none: `migrate --to 0023`
    moved the schema under both (exit 0), and `/ready` answered 503 until someone migrated.
    Every serve and worker now holds a shared lock on <home>/running.lock from its start."""
    home = Path(env["SWITCHBOARD_HOME"])
    port = free_port()
    proc = subprocess.Popen([switchboard_exe(), "serve", "--host", "127.0.0.2", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        lock = home / "running.lock"  # made by `init` already; serve locks it first thing, before its start-up

        def locked() -> bool:
            from switchboard.config import Settings
            from switchboard.instance import exclusive_or_none

            with exclusive_or_none(Settings(home=home)) as alone:
                return not alone

        wait_for(locked, timeout=60, interval=0.05)
        err = fails(env, "migrate", "--to", "0023", "--yes")
        assert err == {"code": "conflict", "message": "a `switchboard serve`, `switchboard worker` or other "
                                                      "`migrate --to` of this instance is running on this machine: "
                                                      "stop it, and every `switchboard worker`, before moving the "
                                                      "schema back"}, err
        wait_for(lambda: _healthy(f"http://127.0.0.2:{port}"), timeout=90, interval=0.1)
        assert fails(env, "migrate", "--to", "0023", "--yes")["code"] == "conflict"
        assert _sql(home / "switchboard.db", "select version_num from alembic_version") == [(head_revision(),)]
        assert lock.stat().st_mode & 0o777 == 0o600
        assert cli(env, "todo", "list")["todos"] == []  # other commands are not held up by it
    finally:
        stop(proc)  # type: ignore[arg-type]
    assert cli(env, "migrate", "--to", "0023", "--yes")["revision"] == "0023"  # its lock went with it


def _healthy(url: str) -> bool:
    try:
        return httpx2.get(f"{url}/api/v1/health", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False


# --- source show -------------------------------------------------------------------------------------

def test_source_show_counts_refusals_by_reason_without_bodies_or_signatures(tmp_path: Path,
                                                                           env: dict[str, str]) -> None:
    cli(env, "identity", "link", "--human", "alice", "--provider", "github", "--external-id", GITHUB_SENDER_ID)
    src = cli(env, "source", "add", "--project", "acme", "--provider", "github")
    port = free_port()
    server = start_serve({**env, "SWITCHBOARD_MAX_BODY_BYTES": "2048"}, port, tmp_path / "serve.log")
    try:
        hook = f"{server.url}/hooks/{src['id']}"
        body = _issue()[:1500] if len(_issue()) > 2048 else _issue()
        forged = "sha256=" + "ab" * 32
        for _ in range(3):
            resp = httpx2.post(hook, content=b'{"secret-body": 1}', timeout=10,
                               headers={**github_headers(b"{}", src["secret"]), "X-Hub-Signature-256": forged})
            assert resp.status_code == 401
        big = b'{"pad": "' + b"y" * 4000 + b'"}'
        assert httpx2.post(hook, content=big, headers=github_headers(big, src["secret"]),
                           timeout=10).status_code == 413
        del body

        def counted() -> dict | None:
            shown = cli(env, "source", "show", src["id"])
            return shown if sum(r["count"] for r in shown["refused"]) == 4 else None

        shown = wait_for(counted, timeout=20, interval=0.5)  # serve flushes its tally every pass (2 s)
    finally:
        stop(server.proc)
    by_reason = {r["reason"]: r for r in shown["refused"]}
    assert by_reason["signature_invalid"]["count"] == 3 and len(by_reason["signature_invalid"]["last_at"]) == 3
    assert by_reason["payload_too_large"]["count"] == 1
    for stamp in by_reason["signature_invalid"]["last_at"]:
        assert datetime.now(UTC) - datetime.fromisoformat(stamp) < timedelta(minutes=5)
    text = run(env, "source", "show", src["id"]).stdout
    assert "signature_invalid: 3 (last " in text and "payload_too_large: 1" in text
    for leak in (forged, "secret-body", "yyyy", src["secret"]):
        assert leak not in text and leak not in json.dumps(shown)
    assert fails(env, "source", "show", "src_nope")["code"] == "not_found"


# --- prune and retention -----------------------------------------------------------------------------

def test_prune_drops_old_bodies_and_rows_and_dedup_holds_for_retained_rows(live: LiveApp) -> None:
    env = cli_env(live.world.settings.home)
    bodies = {n: _issue(number=n) for n in (1, 2, 3)}
    headers = {n: github_headers(b, live.world.secret, delivery=f"guid-{n}") for n, b in bodies.items()}
    ids = {n: live.post_hook(bodies[n], headers[n]).json()["delivery_id"] for n in bodies}
    db = _db(live)
    wait_for(lambda: _sql(db, "select count(*) from deliveries where status = 'processed'")[0][0] == 3)
    now = datetime.now(UTC).replace(tzinfo=None)
    _sql(db, "update deliveries set received_at = ? where id = ?", (now - timedelta(days=10)).isoformat(" "), ids[2])
    _sql(db, "update deliveries set received_at = ? where id = ?", (now - timedelta(days=100)).isoformat(" "), ids[3])
    todo3 = _sql(db, "select todo_id from deliveries where id = ?", ids[3])[0][0]
    _sql(db, "update feed_events set created_at = ? where subject_id = ?", (now - timedelta(days=100)).isoformat(" "),
         todo3)
    old_events = _sql(db, "select count(*) from feed_events where subject_id = ?", todo3)[0][0]
    assert old_events == 1  # todo.created

    dry = cli(env, "prune", "--dry-run")
    assert (dry["raw_bodies"], dry["deliveries"], dry["feed_events"], dry["dry_run"]) == (2, 1, old_events, True)
    assert _sql(db, "select count(*) from deliveries")[0][0] == 3
    text = run(env, "prune").stdout
    assert text.startswith("dropped 2 raw bodies (before ") and f"1 deliveries and {old_events} feed events" in text
    assert _sql(db, "select id from deliveries order by id") == sorted([(ids[1],), (ids[2],)])
    assert _sql(db, "select raw_body is null from deliveries where id = ?", ids[2]) == [(1,)]
    assert _sql(db, "select raw_body is null from deliveries where id = ?", ids[1]) == [(0,)]
    assert _sql(db, "select count(*) from feed_events where subject_id = ?", todo3) == [(0,)]
    assert _sql(db, "select count(*) from todos where id = ?", todo3) == [(1,)]  # todos are not pruned
    assert cli(env, "prune")["raw_bodies"] == 0  # nothing left to do

    # Dedup holds for retained rows, body or not; past the retention a redelivery is new.
    again = live.post_hook(bodies[2], headers[2])
    assert again.status_code == 200 and again.json() == {"delivery_id": ids[2], "duplicate": True}
    assert live.post_hook(bodies[1], headers[1]).json()["duplicate"] is True
    assert live.post_hook(bodies[3], headers[3]).status_code == 202


def test_the_maintenance_pass_drops_raw_bodies_on_schedule(tmp_path: Path) -> None:
    from switchboard.config import Settings
    from tests.conftest import configure, serve_in_thread

    settings = Settings(home=tmp_path / "instance", raw_body_days=0, reap_interval_seconds=0.1)
    world = configure(settings)
    for url, hub in serve_in_thread(settings):
        # Every pass, instead of hourly (the first pass may already have run and set the next for
        # an hour later: `every` starts the schedule again).
        hub.retention.every(0.0)
        body = _issue()
        resp = httpx2.post(f"{url}/hooks/{world.source_id}", content=body,
                           headers=github_headers(body, world.secret), timeout=10)
        delivery_id = resp.json()["delivery_id"]
        db = Path(settings.database_url.split("///", 1)[1])
        wait_for(lambda db=db, delivery_id=delivery_id: _sql(
            db, "select status, raw_body is null from deliveries where id = ?", delivery_id) == [("processed", 1)],
            timeout=20)


# --- replay --------------------------------------------------------------------------------------------

def test_replay_processes_a_failed_delivery_once_and_refuses_what_it_cannot(live: LiveApp) -> None:
    env = cli_env(live.world.settings.home)
    db = _db(live)
    body = _issue(number=7)
    delivery_id = live.post_hook(body, github_headers(body, live.world.secret)).json()["delivery_id"]
    wait_for(lambda: _sql(db, "select status from deliveries where id = ?", delivery_id) == [("processed",)])
    # As if processing had crashed five times before the todo was made.
    _sql(db, "delete from todos where delivery_id = ?", delivery_id)
    _sql(db, "update deliveries set status = 'failed', error_code = 'processing_failed', todo_id = null, "
             "process_failures = 5 where id = ?", delivery_id)

    first = cli(env, "delivery", "replay", delivery_id)
    assert first["status"] == "processed" and first["todo_created"] is True
    todo_id = first["todo_id"]
    assert _sql(db, "select count(*) from todos where delivery_id = ?", delivery_id) == [(1,)]
    text = run(env, "delivery", "replay", delivery_id).stdout.strip()
    assert text == f"delivery {delivery_id}: processed, todo {todo_id} (existing)"
    assert _sql(db, "select count(*) from todos where delivery_id = ?", delivery_id) == [(1,)]
    assert _sql(db, "select count(*) from feed_events where kind = 'todo.created' and subject_id = ?",
                todo_id) == [(1,)]

    stranger = _issue(number=8, sender="424242")
    held = live.post_hook(stranger, github_headers(stranger, live.world.secret)).json()["delivery_id"]
    wait_for(lambda: _sql(db, "select status from deliveries where id = ?", held) == [("quarantined",)])
    assert "quarantine release" in fails(env, "delivery", "replay", held)["message"]
    _sql(db, "update deliveries set status = 'rejected', raw_body = null where id = ?", held)
    err = fails(env, "delivery", "replay", held)
    assert err["code"] == "conflict" and "no stored body" in err["message"]
    assert fails(env, "delivery", "replay", "dlv_unknown")["code"] == "not_found"


# --- backup --------------------------------------------------------------------------------------------

def test_backup_copies_a_consistent_database_while_serving(live: LiveApp, tmp_path: Path) -> None:
    env = cli_env(live.world.settings.home)
    stop_posting = threading.Event()
    posted: list[int] = []

    def post() -> None:
        n = 100
        while not stop_posting.is_set():
            body = _issue(number=n)
            if live.post_hook(body, github_headers(body, live.world.secret)).status_code == 202:
                posted.append(n)
            n += 1

    poster = threading.Thread(target=post, daemon=True)
    poster.start()
    wait_for(lambda: len(posted) >= 3, timeout=30)
    target = tmp_path / "backup.db"
    try:
        out = cli(env, "backup", str(target))
    finally:
        stop_posting.set()
        poster.join(timeout=30)
    assert out["path"] == str(target) and out["bytes"] == target.stat().st_size
    assert out["vault_keys"].endswith("vault.keys")
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    with sqlite3.connect(target) as conn:
        assert conn.execute("pragma integrity_check").fetchone() == ("ok",)
        copied = conn.execute("select count(*) from deliveries").fetchone()[0]
        assert conn.execute("select version_num from alembic_version").fetchone() == (head_revision(),)
    assert 3 <= copied <= len(posted)
    assert fails(env, "backup", str(target))["code"] == "conflict"  # never overwrites


def test_backup_of_postgresql_prints_the_pg_dump_command(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "inst", SWITCHBOARD_DATABASE_URL="postgresql://sb:s3cret-pw@db.internal:5432/switchboard")
    err = fails(env, "backup", str(tmp_path / "x.dump"))
    assert err["code"] == "use_pg_dump"
    assert f"pg_dump --format=custom --file '{tmp_path / 'x.dump'}' 'postgresql://sb@db.internal:5432/switchboard'" \
        in err["message"]
    assert "s3cret-pw" not in err["message"]
    # libpq also reads a password from the query (a review: it was printed, in `migrate --to`'s
    # refusal too); the other parameters stay.
    env = cli_env(tmp_path / "inst2", SWITCHBOARD_DATABASE_URL="postgresql://sb@db.internal/switchboard"
                                                                "?password=s3cret-pw&sslmode=require")
    err = fails(env, "backup", str(tmp_path / "x.dump"))
    assert "'postgresql://sb@db.internal/switchboard?sslmode=require'" in err["message"], err
    assert "s3cret-pw" not in err["message"]


def test_a_backup_that_cannot_be_written_is_a_clear_error_and_leaves_no_half_file(env: dict[str, str],
                                                                                  tmp_path: Path) -> None:
    """A review: a copy failing midway (a full disk) showed sqlite3's traceback and left
    `<path>.partial` beside the target, made with the umask's mode. A target SQLite cannot
    write stands in for the full disk: a directory where the copy's journal must go."""
    target = tmp_path / "copy.db"
    (tmp_path / "copy.db.partial-journal").mkdir()  # SQLite cannot create its journal: the copy fails
    err = fails(env, "backup", str(target), code=1)  # exit 1: worth a retry once there is room
    assert err["code"] == "dependency_unavailable", err
    assert err["message"].startswith(f"could not write the copy to {target}: "), err
    assert not target.exists() and not (tmp_path / "copy.db.partial").exists()


# --- newcomer fixes -------------------------------------------------------------------------------------

def test_todo_assignment_shows_in_add_list_and_show(env: dict[str, str]) -> None:
    cli(env, "agent", "add", "claude1", "--human", "alice")
    cli(env, "grant", "claude1", "acme", "--role", "work")
    added = run(env, "todo", "add", "--project", "acme", "--title", "Review the notes", "--assign", "claude1")
    assert added.returncode == 0
    first, second = added.stdout.strip().splitlines()
    todo_id = first.split()[1]
    assert first == f"todo {todo_id} on default: Review the notes"
    assert second == "assigned to claude1: only it may claim it, and it is woken"
    assert f"{todo_id} [pending] default: Review the notes (assigned to claude1)" in run(env, "todo", "list").stdout
    assert "assigned to: claude1" in run(env, "todo", "show", todo_id).stdout
    assert cli(env, "todo", "show", todo_id)["assigned_agent"] == "claude1"
    unassigned = run(env, "todo", "add", "--project", "acme", "--title", "Anyone").stdout
    assert "assigned" not in unassigned


def test_quarantine_list_says_when_the_sender_is_linked_now(live: LiveApp) -> None:
    env = cli_env(live.world.settings.home)
    body = _issue(number=9, sender="5550001")
    held = live.post_hook(body, github_headers(body, live.world.secret)).json()["delivery_id"]
    wait_for(lambda: cli(env, "quarantine", "list")["deliveries"])
    before = run(env, "quarantine", "list").stdout
    assert f"{held}  unknown_sender  " in before
    cli(env, "human", "add", "bob")
    cli(env, "identity", "link", "--human", "bob", "--provider", "github", "--external-id", "5550001")
    untrusted = run(env, "quarantine", "list").stdout
    assert f"{held}  unknown_sender (now untrusted_sender)  " in untrusted
    cli(env, "project", "owner", "acme", "bob")
    listed = cli(env, "quarantine", "list")["deliveries"][0]
    assert listed["reason"] == "unknown_sender" and listed["reason_now"] is None
    assert "(sender now linked and trusted: release it)" in run(env, "quarantine", "list").stdout
    assert cli(env, "quarantine", "release", held)["status"] == "processed"


def test_token_group_help_names_agent_and_human_tokens() -> None:
    out = subprocess.run([switchboard_exe(), "--help"], capture_output=True, text=True, timeout=60, check=False).stdout
    line = next(x for x in out.splitlines() if x.strip().startswith("token "))
    assert "agent" in line.lower() and "human" in line.lower()


def test_while_serve_runs_cli_links_use_the_port_it_listens_on(tmp_path: Path, env: dict[str, str]) -> None:
    # A new-user run: with `serve --port 18777`, `login` printed a link to 8080 and `doctor` said
    # the hub did not answer there; `source add/show/list` printed 8080 too.
    src = cli(env, "source", "add", "--project", "acme", "--provider", "github")
    port = free_port()
    server = start_serve(env, port, tmp_path / "serve.log")
    try:
        local = f"http://127.0.0.1:{port}"
        assert cli(env, "source", "show", src["id"])["url"] == f"{local}/hooks/{src['id']}"
        assert cli(env, "login", "alice")["url"].startswith(f"{local}/ui/login/")
        # SWITCHBOARD_PUBLIC_URL still wins: it is the address senders use.
        public = {**env, "SWITCHBOARD_PUBLIC_URL": "https://hooks.example.com"}
        assert cli(public, "source", "show", src["id"])["url"] == f"https://hooks.example.com/hooks/{src['id']}"
    finally:
        stop(server.proc)
    assert not (tmp_path / "inst" / "serve.json").exists()  # gone with serve
    assert cli(env, "source", "show", src["id"])["url"].startswith("http://127.0.0.1:8080/hooks/")


def test_serve_prints_each_source_url_at_the_address_it_serves(tmp_path: Path, env: dict[str, str]) -> None:
    src = cli(env, "source", "add", "--project", "acme", "--provider", "github")
    assert src["url"].startswith("http://127.0.0.1:8080/hooks/")  # before serve knows its port
    port = free_port()
    server = start_serve({**env, "SWITCHBOARD_PUBLIC_URL": "https://hooks.example.com"}, port,
                         tmp_path / "serve.log")
    try:
        local = f"http://127.0.0.1:{port}/hooks/{src['id']}"
        deadline = time.monotonic() + 15
        while local not in (log := server.log()) and time.monotonic() < deadline:
            time.sleep(0.1)  # the source lines follow the banner (read in a worker thread)
        assert local in log and f"(public: https://hooks.example.com/hooks/{src['id']})" in log
        body = _issue()
        resp = httpx2.post(local, content=body, headers=github_headers(body, src["secret"]), timeout=10)
        assert resp.status_code == 202
    finally:
        stop(server.proc)


def test_humans_and_projects_are_listed(env: dict[str, str]) -> None:
    # Found by a new user: agents and sources could be listed, humans and projects could not.
    cli(env, "identity", "link", "--human", "alice", "--provider", "github", "--external-id", "21031067",
        "--login", "Codertocat")
    cli(env, "agent", "add", "claude1", "--human", "alice")
    cli(env, "human", "add", "bob")
    [alice, bob] = cli(env, "human", "list")["humans"]
    assert (alice["name"], alice["identities"], alice["agents"], alice["projects"]) == (
        "alice", ["github:Codertocat"], ["claude1"], ["acme"])
    assert (bob["name"], bob["agents"], bob["projects"]) == ("bob", [], [])
    assert "alice (hum_" in run(env, "human", "list").stdout
    source = cli(env, "source", "add", "--project", "acme", "--provider", "github")
    [acme] = cli(env, "project", "list")["projects"]
    assert acme["owners"] == ["alice"] and acme["sources"] == [{"id": source["id"], "provider": "github"}]
    assert "owners alice; 1 source(s)" in run(env, "project", "list").stdout


def test_titles_and_cli_text_carry_no_terminal_escapes_or_bidi_overrides(live: LiveApp) -> None:
    # Found by a break-it review: `esc2 \x1b[2J\x1b[31mRED` in an issue title cleared the
    # operator's terminal in `todo list`, and an unknown sender's login did so in `quarantine list`.
    env = cli_env(live.world.settings.home)
    data = json.loads(_issue(number=31))
    data["issue"]["title"] = "esc2 \x1b[2J\x1b[31mRED \u202eevil\u202c"
    body = json.dumps(data).encode()
    live.post_hook(body, github_headers(body, live.world.secret))
    stranger = json.loads(_issue(number=32, sender="5550099"))
    stranger["sender"]["login"] = "evil\x1b[1;31mROOT\x1b[0m"
    stranger_body = json.dumps(stranger).encode()
    live.post_hook(stranger_body, github_headers(stranger_body, live.world.secret))
    db = _db(live)
    [(title,)] = wait_for(lambda: _sql(db, "select title from todos where title like '%esc2%'"))
    assert "\x1b" not in title and "\u202e" not in title and "RED" in title
    [held] = wait_for(lambda: cli(env, "quarantine", "list")["deliveries"])
    assert held["sender"]["login"] == "evil[1;31mROOT[0m"  # REST, UI and JSON show it clean too
    for args in (("todo", "list"), ("quarantine", "list"), ("delivery", "list")):
        out = run(env, *args)
        assert out.returncode == 0 and "\x1b" not in out.stdout and "\u202e" not in out.stdout, args


def test_no_instance_names_where_the_folder_came_from(tmp_path: Path) -> None:
    # Found by a new user: the message said SWITCHBOARD_HOME=... although it was not set.
    env = {k: v for k, v in cli_env(tmp_path / "instance").items() if k != "SWITCHBOARD_HOME"}
    proc = subprocess.run([switchboard_exe(), "agent", "list"], env=env, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "SWITCHBOARD_HOME is not set" in proc.stderr, proc.stderr
    set_home = subprocess.run([switchboard_exe(), "agent", "list"], env=cli_env(tmp_path / "elsewhere"),
                              capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert f"{tmp_path / 'elsewhere'} (SWITCHBOARD_HOME)" in set_home.stderr


def test_a_grant_with_a_wrong_role_shows_the_command_as_typed(env: dict[str, str]) -> None:
    # Found by a new-user run: the usage line read "switchboard grant grant ...", a command that
    # does not exist.
    cli(env, "agent", "add", "claude1", "--human", "alice")
    refused = run(env, "grant", "claude1", "acme", "--role", "admin")
    assert refused.returncode == 2
    assert "Usage: switchboard grant [OPTIONS] AGENT_NAME PROJECT_NAME" in refused.stderr
    assert "Try 'switchboard grant --help'" in refused.stderr
    assert "grant grant" not in refused.stderr
    assert "'admin' is not one of 'read', 'work'" in refused.stderr


def test_serve_on_a_port_in_use_says_what_to_do(env: dict[str, str]) -> None:
    # Found by a new-user run: the refusal named the cause but not the way out.
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = run(env, "serve", "--port", str(port))
    assert refused.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in refused.stderr
    assert "choose --port or SWITCHBOARD_PORT" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_serve_prints_its_address_once_it_listens(env: dict[str, str]) -> None:
    # A new-user run: the banner came 6 s before serve listened (the children warm up first), and
    # the README's first `curl -s` right after it was refused and printed nothing. One try, the
    # moment the banner is out, no retry.
    port = free_port()
    proc = subprocess.Popen([switchboard_exe(), "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while True:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            assert line, "serve ended before its banner: " + "".join(lines)
            lines.append(line)
            if f" on http://127.0.0.1:{port} " in line:
                break
        assert httpx2.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=30).status_code == 200
        assert "no sources yet" in proc.stderr.readline()  # type: ignore[union-attr]
    finally:
        stop(proc)


def test_worker_without_redis_says_how_serve_processes_instead(tmp_path: Path) -> None:
    # A new-user run: it said serve processes "in its own thread"; the default is a child process.
    proc = subprocess.run([switchboard_exe(), "worker"], env=cli_env(tmp_path / "instance"), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "needs SWITCHBOARD_REDIS_URL" in proc.stderr and "in a child process" in proc.stderr


def test_todo_add_refuses_a_title_over_300_characters_rather_than_cutting_it(env: dict[str, str]) -> None:
    err = fails(env, "todo", "add", "--project", "acme", "--title", "t" * 301)
    assert err == {"code": "invalid_argument", "message": "title must be 1-300 characters on one line"}
    assert cli(env, "todo", "add", "--project", "acme", "--title", "t" * 300)["title"] == "t" * 300
