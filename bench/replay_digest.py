"""What the replay digest (issue 12 #7) costs on the receiver's store path.

Stores distinct 5 KB GitHub deliveries through the receiver's own writer
(:class:`switchboard.web.ingest.DeliveryWriter`: ``INSERT ... ON CONFLICT DO NOTHING`` in its
write thread, one delivery in flight so each is its own transaction, SQLite, one process) in
alternating rounds: with the body digest (SHA-256 of the body, a second unique index to
maintain) and without it (``body_digest=None``, as before). The SHA-256 itself is counted. Prints the median per-delivery time of each and
their ratio; rounds alternate so machine load hits both alike.

Usage::

    .venv/bin/python -P bench/replay_digest.py [--rounds 7] [--per-round 400]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=400)
    args = parser.parse_args()

    from switchboard import admin
    from switchboard.config import Settings
    from switchboard.db import upgrade
    from switchboard.hub import Hub
    from switchboard.models.base import new_ordered_id
    from switchboard.models.stamps import read_stamp
    from switchboard.web.ingest import DeliveryWriter

    home = Path(tempfile.mkdtemp(prefix="sb-digest-"))
    settings = Settings(home=home / "instance")
    upgrade(settings)
    hub = Hub(settings, role="cli")
    with hub.db.write() as s:
        admin.add_project(s, "bench")
        source, _ = admin.add_source(s, "bench", "github", "bench-secret")
        stamp = read_stamp(s.connection())
    writer = DeliveryWriter(hub, on_stored=lambda _id: None)
    counter = 0

    async def batch(with_digest: bool) -> float:
        nonlocal counter
        started = time.perf_counter()
        for _ in range(args.per_round):
            counter += 1
            body = json.dumps({"action": "opened", "issue": {"number": counter, "body": "x" * 5000}}).encode()
            row = {"id": new_ordered_id("dlv"), "source_id": source.id, "project_id": source.project_id,
                   "dedup_key": "github:" + uuid.uuid4().hex,
                   "body_digest": hashlib.sha256(body).hexdigest() if with_digest else None,
                   "status": "received", "event": "issues", "content_type": "application/json", "headers": {},
                   "raw_body": body, "body_bytes": len(body), "human_id": None, "quarantine_reason": None,
                   "error_code": None, "error_detail": None, "todo_id": None, "process_failures": 0,
                   "received_at": hub.clock.now(), "processed_at": None, "released_at": None, "released_by": None}
            outcome, _ = await writer.store(row, stamp, dispatch=False)
            assert outcome == "stored", outcome
        return (time.perf_counter() - started) / args.per_round * 1e6

    async def run() -> tuple[list[float], list[float]]:
        await batch(True)  # warm-up
        without, with_ = [], []
        for _ in range(args.rounds):
            without.append(await batch(False))
            with_.append(await batch(True))
        return without, with_

    try:
        without, with_ = asyncio.run(run())
    finally:
        writer.close()
        hub.close()
    a, b = statistics.median(without), statistics.median(with_)
    print(f"store path, SQLite, {args.rounds} rounds x {args.per_round} distinct 5 KB deliveries")
    print(f"without digest: median {a:8.1f} us per delivery")
    print(f"with digest:    median {b:8.1f} us per delivery   ratio {b / a:.2f}x")


if __name__ == "__main__":
    main()
