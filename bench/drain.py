"""Processing with rq workers (issue 11: "with rq + Redis, scaling with workers"): how fast 1,
then 2, ... ``switchboard worker`` processes drain a backlog of verified deliveries.

Each run starts a fresh instance (SQLite, or a fresh PostgreSQL database), a ``redis-server``,
``switchboard serve`` with ``SWITCHBOARD_REDIS_URL`` set, and the run's workers, every one
suspended with rq's own suspension (``rq suspend``: up, connected and warmed, taking no job).
``serve`` then acks ``--deliveries`` distinct signed 5 KB GitHub ``issues`` deliveries (16
keep-alive connections) and hands them to rq; once every delivery is in the queue's jobs, the
workers are resumed and the deliveries processed end to end (a todo, a feed event and a wake
each) are counted every 20 ms. The rate is read between 10 % and 90 % of the backlog, both
marks taken once every worker has taken a job: the workers' steady state, without their
start-up, rq's one-second suspension poll (each worker's own) or the tail. A run fails unless
every delivery ends processed into a todo with every worker still running. The worker counts
take turns within each round, so a change in the machine's speed reaches them alike.

On a 2-core machine ``serve`` is idle while the backlog drains, so a second worker has the
second core: the ratio says whether processing scales with workers when cores are free
(``bench/wake.py --rq`` measures processing beside a full-speed receiver instead, where a
second worker takes CPU from it).

Usage::

    .venv/bin/python bench/drain.py [--deliveries 4000] [--workers 1,2] [--runs 3]
                                    [--postgres-url URL | --no-postgres] [--no-sqlite]

The last line is ``drained per second: sqlite 1 worker N, 2 workers M (xR); postgresql ...``
(medians). PostgreSQL: ``--postgres-url`` (or ``SWITCHBOARD_TEST_DATABASE_URL``), else a
throwaway server from the machine's binaries, as ``bench/queue.py`` does (the test install).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from bench import ingest  # ports, signed requests, the load generator, process start


def _counts(settings: object) -> tuple[Callable[[], int], Callable[[], int], object]:
    """Functions counting the deliveries still ``received`` and those ``processed`` into a todo,
    and the engine they read with (to dispose of)."""
    import sqlalchemy as sa

    from switchboard.db import make_engine

    engine = make_engine(settings)  # type: ignore[arg-type]

    def count(sql: str) -> Callable[[], int]:
        query = sa.text(sql)

        def run() -> int:
            with engine.connect() as conn:
                return int(conn.execute(query).scalar_one())
        return run

    return (count("SELECT count(*) FROM deliveries WHERE status = 'received'"),
            count("SELECT count(*) FROM deliveries WHERE status = 'processed' AND todo_id IS NOT NULL"), engine)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-2000:].decode(errors="replace")
    except OSError:
        return ""


def _all_at_work(workers: list[object]) -> bool:
    """Whether every rq worker has taken a job since it was resumed (busy now, or done one)."""
    for worker in workers:
        worker.refresh()  # type: ignore[attr-defined]
        if worker.get_state() != "busy" and not worker.successful_job_count:  # type: ignore[attr-defined]
            return False
    return True


def drain(settings: object, env: dict[str, str], workers: int, deliveries: int) -> dict[str, float]:
    """One run: ``deliveries`` acked by ``serve`` with ``workers`` suspended workers, then drained.

    Returns:
        ``{"rate": deliveries processed per second between the first poll at or past 10 % and
        the first at or past 90 % of the backlog, both after every worker took a job (the whole
        drain's rate when they fall on one poll), "cpu": the workers' CPU microseconds per
        delivery over the whole drain, "acked": acked per second}``.

    Raises:
        SystemExit: a process did not start, a delivery was not acked or not processed into a
            todo, a worker died, or a wait passed its deadline (60 s plus a second per 20
            deliveries for the drain); every process started is stopped first.
    """
    import redis
    from rq import Queue, Worker
    from rq.suspension import resume, suspend

    from switchboard.queue.dispatcher import RQ_QUEUE

    source_id, _ = ingest._configure(Path(env["SWITCHBOARD_HOME"]), settings)
    tmp = Path(env["SWITCHBOARD_HOME"]).parent
    ports = {"redis": ingest._port(), "serve": ingest._port()}
    redis_url = f"redis://127.0.0.1:{ports['redis']}/0"
    env = {**env, "SWITCHBOARD_REDIS_URL": redis_url}
    exe = str(Path(sys.executable).with_name("switchboard"))
    procs: list[subprocess.Popen[bytes]] = []
    conn = None
    left, processed, engine = _counts(settings)
    logs = [tmp / f"worker{i}.log" for i in range(workers)]
    try:
        procs.append(ingest._start([shutil.which("redis-server") or "redis-server", "--port", str(ports["redis"]),
                                    "--save", "", "--appendonly", "no", "--dir", str(tmp)], env, ports["redis"]))
        conn = redis.Redis.from_url(redis_url)
        suspend(conn)
        procs.append(ingest._start([exe, "serve", "--port", str(ports["serve"])], env, ports["serve"]))
        pool = []
        for log in logs:
            with log.open("wb") as err:
                pool.append(subprocess.Popen([exe, "worker"], env=ingest.checkout_env(env), cwd=ROOT,
                                             stdout=subprocess.DEVNULL, stderr=err))
        procs.extend(pool)

        def check_workers() -> None:
            for proc, log in zip(pool, logs, strict=True):
                if proc.poll() is not None:
                    raise SystemExit(f"a worker exited with code {proc.returncode}:\n{_tail(log)}")

        deadline = time.monotonic() + 180
        while len(Worker.all(connection=conn)) < workers:
            check_workers()
            if time.monotonic() > deadline:
                raise SystemExit(f"{workers} workers did not all start within 180 s")
            time.sleep(0.2)
        elapsed, _, statuses = asyncio.run(ingest.load(
            ports["serve"], ingest.github_requests(f"/hooks/{source_id}", deliveries), 16))
        if statuses != {202: deliveries}:
            raise SystemExit(f"unexpected answers {statuses}")
        queue, deadline = Queue(RQ_QUEUE, connection=conn), time.monotonic() + 60
        while sum(len(job.args[0]) for job in queue.get_jobs()) < deliveries:  # the hand-off lingers
            if time.monotonic() > deadline:
                raise SystemExit(f"the {deliveries} deliveries were not all queued for rq within 60 s")
            time.sleep(0.05)
        if left() != deliveries:
            raise SystemExit(f"{left()} of {deliveries} deliveries waiting before the drain")
        cpu_before = sum(ingest._cpu_seconds(p.pid) for p in pool)
        registered = Worker.all(connection=conn)
        resume(conn)
        began = time.perf_counter()
        marks: dict[float, tuple[float, int]] = {}  # share -> (seconds since resume, deliveries done)
        at_work = False
        deadline = time.monotonic() + 60 + deliveries / 20
        while True:
            done = deliveries - left()
            now = time.perf_counter() - began
            at_work = at_work or _all_at_work(registered)
            for share in (0.1, 0.9):
                if at_work and share not in marks and done >= share * deliveries:
                    marks[share] = (now, done)
            if done >= deliveries:
                break
            check_workers()
            if time.monotonic() > deadline:
                raise SystemExit(f"{deliveries - done} deliveries not processed by the deadline")
            time.sleep(0.02)
        cpu = sum(ingest._cpu_seconds(p.pid) for p in pool) - cpu_before
        check_workers()
        if processed() != deliveries:
            raise SystemExit(f"{processed()} of {deliveries} deliveries processed into a todo")
        (t10, d10), (t90, d90) = marks.get(0.1, (0.0, 0)), marks.get(0.9, (now, deliveries))
        rate = (d90 - d10) / (t90 - t10) if t90 > t10 and d90 > d10 else deliveries / now
        return {"rate": rate, "cpu": cpu * 1e6 / deliveries, "acked": deliveries / elapsed}
    finally:
        _stop(list(reversed(procs)))
        if conn is not None:
            conn.close()
        engine.dispose()  # type: ignore[attr-defined]


def _drop_database(database_url: str) -> None:
    """Drop a database ``tests.services.fresh_postgres_database`` made (from ``postgres`` there)."""
    import psycopg
    from psycopg import sql

    from tests.services import _libpq_url

    parts = urlsplit(database_url)
    with psycopg.connect(_libpq_url(urlunsplit(parts._replace(path="/postgres"))), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(parts.path[1:])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--deliveries", type=int, default=4000, help="the backlog each run drains")
    parser.add_argument("--workers", default="1,2", help="worker counts to compare, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="rounds (each worker count once a round)")
    parser.add_argument("--postgres-url", default=None,
                        help="a PostgreSQL server (any database on it: a fresh one is made, and dropped, per run)")
    parser.add_argument("--no-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument("--no-sqlite", action="store_true", help="measure PostgreSQL only")
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    if not shutil.which("redis-server"):
        raise SystemExit("bench/drain.py needs redis-server on the PATH")
    from switchboard.config import Settings

    with ExitStack() as stack:
        backends: list[tuple[str, str | None]] = [] if args.no_sqlite else [("sqlite", None)]
        if not args.no_postgres:
            try:
                from tests.services import fresh_postgres_database, running_postgres
            except ModuleNotFoundError as exc:
                raise SystemExit(f"the PostgreSQL part uses tests/services.py, which needs the test install "
                                 f"({exc.name} is missing): .venv/bin/pip install -e '.[test]', or --no-postgres"
                                 ) from None
            backends.append(("postgresql", args.postgres_url or stack.enter_context(running_postgres())))
        ring = f"bench:{base64.urlsafe_b64encode(os.urandom(32)).decode()}"  # one ring for every process
        base = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        print(f"drain of {args.deliveries} acked GitHub deliveries by rq workers on {os.cpu_count()} cores "
              f"(load average {os.getloadavg()[0]:.1f}; shared machine: compare ratios), {args.runs} rounds")
        summary = []
        for name, server in backends:
            rates: dict[int, list[dict[str, float]]] = {k: [] for k in counts}
            for _ in range(args.runs):
                for k in counts:
                    home = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "instance"
                    env = {**base, "SWITCHBOARD_HOME": str(home)}
                    if server is None:
                        rates[k].append(drain(Settings(home=home), env, k, args.deliveries))
                        continue
                    url = fresh_postgres_database(server)
                    env.update(SWITCHBOARD_DATABASE_URL=url, SWITCHBOARD_VAULT_KEYS=ring)
                    try:
                        rates[k].append(drain(Settings(home=home, database_url=url, vault_keys=ring), env, k,
                                              args.deliveries))
                    finally:
                        _drop_database(url)
            base_rate = statistics.median(r["rate"] for r in rates[counts[0]])
            for k in counts:
                rate = statistics.median(r["rate"] for r in rates[k])
                runs = ", ".join(f"{r['rate']:.0f}" for r in rates[k])
                print(f"  {name:<10} {k} worker{'s' if k > 1 else ' '}  {rate:7.0f} processed/s  "
                      f"(x{rate / base_rate:.2f} of {counts[0]}; runs {runs}; "
                      f"workers' CPU {statistics.median(r['cpu'] for r in rates[k]):.0f} µs a delivery; "
                      f"acked {statistics.median(r['acked'] for r in rates[k]):.0f}/s before)")
            summary.append(f"{name} " + ", ".join(
                f"{k} worker{'s' if k > 1 else ''} {statistics.median(r['rate'] for r in rates[k]):.0f}"
                for k in counts) + f" (x{statistics.median(r['rate'] for r in rates[counts[-1]]) / base_rate:.2f})")
        print("drained per second: " + "; ".join(summary))


if __name__ == "__main__":
    main()
