"""What the replay digest (issue 12 #7) costs on the receiver's store path.

Stores distinct 5 KB GitHub deliveries through the receiver's own ``_store`` (dedup lookups
and insert in one write transaction, SQLite, one process) in alternating rounds: with the body
digest (SHA-256 of the body, a second index seek, a second unique index to maintain) and
without it (``body_digest=None``, as before). Prints the median per-delivery time of each and
their ratio; rounds alternate so machine load hits both alike.

Usage::

    .venv/bin/python -P bench/replay_digest.py [--rounds 7] [--per-round 400]
"""

from __future__ import annotations

import argparse
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
    from switchboard.models import Delivery
    from switchboard.web.receiver import _store

    home = Path(tempfile.mkdtemp(prefix="sb-digest-"))
    settings = Settings(home=home / "instance")
    upgrade(settings)
    hub = Hub(settings, role="cli")
    with hub.db.write() as s:
        admin.add_project(s, "bench")
        source, _ = admin.add_source(s, "bench", "github", "bench-secret")
    counter = 0

    def batch(with_digest: bool) -> float:
        nonlocal counter
        started = time.perf_counter()
        for _ in range(args.per_round):
            counter += 1
            body = json.dumps({"action": "opened", "issue": {"number": counter, "body": "x" * 5000}}).encode()
            delivery = Delivery(source_id=source.id, project_id=source.project_id,
                                dedup_key="github:" + uuid.uuid4().hex,
                                body_digest=hashlib.sha256(body).hexdigest() if with_digest else None,
                                raw_body=body, body_bytes=len(body), received_at=hub.clock.now())
            assert _store(hub, delivery) is None
        return (time.perf_counter() - started) / args.per_round * 1e6

    try:
        batch(True)  # warm-up
        without, with_ = [], []
        for _ in range(args.rounds):
            without.append(batch(False))
            with_.append(batch(True))
    finally:
        hub.close()
    a, b = statistics.median(without), statistics.median(with_)
    print(f"store path, SQLite, {args.rounds} rounds x {args.per_round} distinct 5 KB deliveries")
    print(f"without digest: median {a:8.1f} us per delivery")
    print(f"with digest:    median {b:8.1f} us per delivery   ratio {b / a:.2f}x")


if __name__ == "__main__":
    main()
