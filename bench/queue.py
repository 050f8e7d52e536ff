"""Queue benchmark (issue 5, DESIGN.md §8): claim+complete throughput with 8 claimer processes,
and claim latency with 1k, 100k and 1M todos in the table, on SQLite and on PostgreSQL.

Usage::

    python bench/queue.py [--claimers 8] [--todos 4000] [--runs 3] [--sizes 1000,100000,1000000]
                          [--postgres-url URL | --no-postgres]

The last line is ``claim+complete per second: sqlite N, postgresql M`` (medians).

PostgreSQL: ``--postgres-url`` (or ``SWITCHBOARD_TEST_DATABASE_URL``), else a throwaway server
is started from the machine's binaries, as the tests do. Prints medians and ratios measured in
the same run; machines are shared and noisy, so compare ratios, not absolute figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named queue.py: take its folder off the path so `import queue` finds the stdlib.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import base64
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from contextlib import ExitStack

from sqlalchemy import insert  # noqa: E402

from switchboard import admin, direct  # noqa: E402
from switchboard.clock import utcnow  # noqa: E402
from switchboard.config import Settings  # noqa: E402
from switchboard.db import upgrade  # noqa: E402
from switchboard.hub import Hub  # noqa: E402
from switchboard.models import Todo  # noqa: E402
from switchboard.models.base import new_id  # noqa: E402
from switchboard.queue import leases  # noqa: E402
from switchboard.queue.todos import resolve_projects  # noqa: E402


def setup(settings: Settings, claimers: int) -> str:
    """Migrate, create alice, project acme and agents w0..wN with work; return the project id."""
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            project = admin.add_project(s, "acme")
            for i in range(claimers):
                admin.add_agent(s, f"w{i}", "alice")
                admin.grant(s, f"w{i}", "acme", "work")
            return project.id
    finally:
        hub.close()


def fill(settings: Settings, project_id: str, n: int, state: str = "pending") -> None:
    """Bulk-insert ``n`` todos in ``state`` (batches of 10,000)."""
    hub = Hub(settings, role="cli")
    try:
        for start in range(0, n, 10_000):
            now = utcnow()
            rows = [{"id": new_id("td"), "project_id": project_id, "queue": "load", "state": state, "kind": "load",
                     "title": "load", "priority": 0, "attempt_count": 0, "failure_count": 0, "max_attempts": 5,
                     "ring_count": 1, "created_at": now, "updated_at": now}
                    for _ in range(min(10_000, n - start))]
            with hub.db.write() as s:
                s.execute(insert(Todo), rows)
    finally:
        hub.close()


def analyze(settings: Settings) -> None:
    """Refresh planner statistics after a bulk load, as autovacuum (or SQLite's optimize) would."""
    hub = Hub(settings, role="cli")
    try:
        with hub.db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE todos" if not hub.db.is_sqlite else "ANALYZE")
            conn.commit()
    finally:
        hub.close()


def _claim(hub: Hub, agent_id: str, grants: dict[str, str], one: bool, **where: object) -> dict:
    """The next todo on queue ``load``, as the claim tool takes it: in a direct write (prepared
    statements, no ORM session, issue 11), on PostgreSQL one statement without BEGIN/COMMIT
    (``one``: ``leases.one_statement``)."""
    return direct.run(hub.db, leases.claim, hub.clock, agent_id, grants, queue="load",
                      is_postgres=not hub.db.is_sqlite, autocommit=one, **where)


def _complete(hub: Hub, agent_id: str, grants: dict[str, str], one: bool, claim: dict) -> None:
    """Complete what :func:`_claim` returned, as the complete tool does."""
    direct.run(hub.db, leases.complete, hub.clock, agent_id, grants, todo_id=claim["todo"]["id"],
               lease_token=claim["lease_token"], autocommit=one)


def _claimer(settings: Settings, name: str, ready: mp.Queue, start: mp.Event, out: mp.Queue) -> None:  # type: ignore[type-arg]
    hub = Hub(settings, role="cli")
    n = 0
    with hub.db.read() as s:
        agent_id = admin.agent_by_name(s, name).id
        grants = admin.grants_of(s, agent_id)
        # Resolved once, as a long-running claimer does (issue 11), not on every claim.
        project_ids = resolve_projects(s, grants, "acme", need_work=True)
    # As the claim and complete tools do: on PostgreSQL each is one statement, run without
    # BEGIN/COMMIT round trips (Database.write(autocommit=True)).
    one = leases.one_statement(not hub.db.is_sqlite, hub.clock)
    ready.put(name)
    start.wait()
    while True:
        claim = _claim(hub, agent_id, grants, one, project_ids=project_ids)
        if claim.get("empty"):
            break
        _complete(hub, agent_id, grants, one, claim)
        n += 1
    out.put(n)
    hub.close()


def throughput(settings: Settings, claimers: int, todos: int) -> float:
    """claim+complete per second with ``claimers`` processes draining ``todos``."""
    project_id = setup(settings, claimers)
    fill(settings, project_id, todos)
    # Planner statistics as autovacuum gathers them after a bulk load (at most a minute later on a
    # real queue). Without any (a table never analysed) PostgreSQL found every index about as
    # cheap as the primary key for a complete, and sometimes scanned the project's todos.
    analyze(settings)
    ctx = mp.get_context("spawn")
    ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(settings, f"w{i}", ready, start, out)) for i in range(claimers)]
    for p in procs:
        p.start()
    # The clock starts when every process has imported, connected and read its grants: with 8
    # processes on 2 cores the imports alone take longer than a fixed pause (issue 11).
    for _ in procs:
        ready.get(timeout=120)
    time.sleep(0.2)
    began = time.perf_counter()
    start.set()
    done = sum(out.get(timeout=600) for _ in procs)
    elapsed = time.perf_counter() - began
    for p in procs:
        p.join()
    assert done == todos, (done, todos)
    return done / elapsed


def claim_latency(settings_by_size: dict[int, Settings], samples: int = 300, rounds: int = 10) -> dict[int, list[float]]:
    """Milliseconds of each claim (next in queue, each followed by a complete), by table size.

    The sizes take turns, ``samples // rounds`` claims each per round, so that a change in the
    machine's speed during the run (it is shared) reaches every size alike and the ratios
    between sizes stay readable; measured one size after the other, minutes apart (a 1 M-row
    fill takes that long), the same code gave ratios from 0.4 to 2.3.
    """
    claimers = {}
    with ExitStack() as stack:
        for size, settings in settings_by_size.items():
            hub = Hub(settings, role="cli")
            stack.callback(hub.close)
            with hub.db.read() as s:
                agent_id = admin.agent_by_name(s, "w0").id
                grants = admin.grants_of(s, agent_id)
            claimers[size] = (hub, agent_id, grants, leases.one_statement(not hub.db.is_sqlite, hub.clock))
        times: dict[int, list[float]] = {size: [] for size in settings_by_size}
        for _ in range(rounds):
            for size, (hub, agent_id, grants, one) in claimers.items():
                for _ in range(samples // rounds):
                    t0 = time.perf_counter()
                    claim = _claim(hub, agent_id, grants, one, project="acme")
                    times[size].append((time.perf_counter() - t0) * 1000)
                    _complete(hub, agent_id, grants, one, claim)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--claimers", type=int, default=8, help="claimer processes draining the queue together")
    parser.add_argument("--todos", type=int, default=4000, help="pending todos to drain in each throughput run")
    parser.add_argument("--sizes", default="1000,100000,1000000",
                        help="todos in the table for the claim latency part, comma-separated")
    parser.add_argument("--postgres-url", default=None,
                        help="a PostgreSQL database to use (else SWITCHBOARD_TEST_DATABASE_URL, else a throwaway "
                             "server from the machine's binaries)")
    parser.add_argument("--no-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument("--no-sqlite", action="store_true", help="measure PostgreSQL only")
    parser.add_argument("--skip-throughput", action="store_true", help="measure only the claim latency by table size")
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per database (median shown)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]

    with ExitStack() as stack:
        backends: list[tuple[str, object]] = [] if args.no_sqlite else [("sqlite", None)]
        if not args.no_postgres:
            url = args.postgres_url
            if url is None:
                try:
                    from tests.services import fresh_postgres_database, running_postgres
                except ModuleNotFoundError as exc:  # pytest: tests/services.py also holds fixtures
                    raise SystemExit(
                        f"the PostgreSQL part starts a throwaway server with tests/services.py, which needs "
                        f"the test extra ({exc.name} is missing): .venv/bin/pip install -e '.[test]', or pass "
                        f"--postgres-url URL, or --no-postgres") from None

                server = stack.enter_context(running_postgres())
                url = server
                backends.append(("postgresql", lambda: fresh_postgres_database(server)))
            else:
                backends.append(("postgresql", lambda: url))

        # One ring given to every process of the PostgreSQL part, as a deployment sharing a database
        # would: without it each claimer process warned that the ring is not shared.
        ring = f"bench:{base64.urlsafe_b64encode(os.urandom(32)).decode()}"

        def settings_for(name: str, make: object) -> Settings:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            if name == "sqlite":
                return Settings(home=home)
            return Settings(home=home, database_url=make(), vault_keys=ring)  # type: ignore[operator]

        if not args.skip_throughput:
            print(f"claim+complete throughput, {args.claimers} claimer processes, {args.todos} todos, median of "
                  f"{args.runs} runs (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        rates: dict[str, float] = {}
        for name, make in ([] if args.skip_throughput else backends):
            runs = sorted(throughput(settings_for(name, make), args.claimers, args.todos) for _ in range(args.runs))
            rates[name] = statistics.median(runs)
            print(f"  {name:<10} {rates[name]:8.0f} claim+complete/s   (goal >= 1000/s; runs: "
                  f"{', '.join(f'{r:.0f}' for r in runs)})")

        print("claim latency (next in queue) by todos in the table (90% done, 10% pending; "
              "the sizes take turns, 30 claims each per round)")
        for name, make in backends:
            by_size = {}
            for size in sizes:
                by_size[size] = settings = settings_for(name, make)
                project_id = setup(settings, 1)
                fill(settings, project_id, size - size // 10, state="done")
                fill(settings, project_id, max(size // 10, 400))
                analyze(settings)
            base = None
            for size, times in claim_latency(by_size).items():
                times.sort()
                median, p99 = statistics.median(times), times[int(len(times) * 0.99) - 1]
                base = base or median
                print(f"  {name:<10} {size:>9,} todos: median {median:6.2f} ms  p99 {p99:6.2f} ms  "
                      f"ratio to {sizes[0]:,}: {median / base:4.2f}")
        if rates:
            print("claim+complete per second: " + ", ".join(f"{name} {rate:.0f}" for name, rate in rates.items()))


if __name__ == "__main__":
    main()
