"""The CLI's at-head check against a full Alembic upgrade (issue 14, item 9).

Usage: ``python bench/cli_start.py [--runs 20]``. Creates a fresh SQLite instance in a
temporary folder, then times (median and max of ``--runs``, in-process, after one warm-up):

- ``require_at_head``: what every CLI command other than init/serve/worker/migrate runs now;
- ``alembic upgrade head`` on a database already at head: what every command ran before;
- the same two in a new process (what a CLI start pays: imports included), minus a process that
  only builds the settings (median of 5 each);
- a whole ``switchboard todo list`` process (median of 5), for scale.

Goal (issue 14): the at-head check ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.schema import head_revision, require_at_head

_SETUP = "from switchboard.config import Settings; s = Settings.from_env(); "
COLD = {
    "baseline": _SETUP,
    "at-head check": _SETUP + "from switchboard.schema import require_at_head; require_at_head(s)",
    "alembic upgrade": _SETUP + "from switchboard.db import upgrade; upgrade(s)",
}


def _time(fn, runs: int) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp) / "instance")
        upgrade(settings)
        check = _time(lambda: (head_revision.cache_clear(), require_at_head(settings)), args.runs)
        full = _time(lambda: upgrade(settings), max(3, args.runs // 4))
        env = {**os.environ, "SWITCHBOARD_HOME": str(settings.home)}
        exe = str(Path(sys.executable).with_name("switchboard"))
        cold = {}
        for name, code in COLD.items():
            cold[name] = []
            for _ in range(5):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
                cold[name].append((time.perf_counter() - start) * 1000)
        procs = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([exe, "todo", "list"], env=env, check=True, capture_output=True)
            procs.append((time.perf_counter() - start) * 1000)
    print(f"{'what':<44} {'median ms':>10} {'max ms':>8}")
    print(f"{'at-head check (require_at_head, cold cache)':<44} {statistics.median(check):>10.1f} {max(check):>8.1f}")
    print(f"{'alembic upgrade head (already at head)':<44} {statistics.median(full):>10.1f} {max(full):>8.1f}")
    base = statistics.median(cold["baseline"])
    for name in ("at-head check", "alembic upgrade"):
        extra = statistics.median(cold[name]) - base
        print(f"{'new process: ' + name + ' (minus baseline)':<44} {extra:>10.1f}")
    print(f"{'whole `switchboard todo list` process':<44} {statistics.median(procs):>10.1f} {max(procs):>8.1f}")
    print(f"check / upgrade: {statistics.median(check) / statistics.median(full):.1%}")


if __name__ == "__main__":
    main()
