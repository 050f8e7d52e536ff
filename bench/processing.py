"""Processing benchmark (issue 11): CPU per delivery of ``jobs.process_batch`` on stored deliveries.

Stores ``--deliveries`` distinct signed 5 KB GitHub ``issues`` deliveries through a real
``switchboard serve`` whose jobs go to a local ``redis-server`` with no worker (so nothing
processes them), stops it, then processes them in this process with ``jobs.process_batch`` in
batches of each ``--batch`` size (the first half of the deliveries warms the caches, the second
half is timed) and prints milliseconds of CPU and of wall time per delivery. Needs
``redis-server`` on ``PATH``.

Usage::

    .venv/bin/python bench/processing.py [--deliveries 2000] [--batch 8,16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from bench import ingest  # noqa: E402  (instance set-up, signed requests, the load client)


def _stored(home: Path, n: int) -> list[str]:
    """Store ``n`` deliveries through ``serve`` (jobs to Redis, no worker); their ids, oldest first."""
    source, _ = ingest._configure(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_HOME"] = str(home)
    port, redis_port = ingest._port(), ingest._port()
    redis = ingest._start([shutil.which("redis-server") or "redis-server", "--port", str(redis_port), "--save", "",
                           "--appendonly", "no", "--dir", str(home)], env, redis_port)
    env["SWITCHBOARD_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    serve = ingest._start([str(Path(sys.executable).with_name("switchboard")), "serve", "--port", str(port)], env, port)
    try:
        _, _, statuses = asyncio.run(ingest.load(port, ingest.github_requests(f"/hooks/{source}", n), 16))
        assert statuses == {202: n}, statuses
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        redis.terminate()
        redis.wait(timeout=10)
    conn = sqlite3.connect(home / "switchboard.db")
    try:
        return [row[0] for row in conn.execute(
            "SELECT id FROM deliveries WHERE status = 'received' ORDER BY received_at, id")]
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deliveries", type=int, default=2000, help="stored per batch size measured")
    parser.add_argument("--batch", default="8,16", help="batch sizes (comma-separated)")
    args = parser.parse_args()
    from switchboard.config import Settings
    from switchboard.hub import Hub
    from switchboard.queue import jobs

    print(f"processing on {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}), "
          f"{args.deliveries} stored 5 KB GitHub deliveries per batch size, one process")
    for size in (int(x) for x in args.batch.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "instance"
            ids = _stored(home, args.deliveries)
            hub = Hub(Settings(home=home), role="worker")
            hub.settle()  # as the processing process: intake rules built, start-up heap frozen
            try:
                half = len(ids) // 2
                for i in range(0, half, size):
                    jobs.process_batch(hub, ids[i:i + size])
                timed = ids[half:]
                wall, cpu = time.perf_counter(), time.process_time()
                for i in range(0, len(timed), size):
                    jobs.process_batch(hub, timed[i:i + size])
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            finally:
                hub.close()
            print(f"  {size:3d} per batch: {cpu / len(timed) * 1000:6.3f} ms CPU, {wall / len(timed) * 1000:6.3f} ms wall "
                  f"per delivery ({len(timed) / wall:5.0f} deliveries/s)")


if __name__ == "__main__":
    main()
