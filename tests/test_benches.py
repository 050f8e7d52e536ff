"""The benchmarks in ``bench/`` still run (tiny sizes; no figure is checked: figures are for
people, measured on a quiet machine, never asserted). A bench that imports a removed internal
fails here rather than in front of the next person who measures."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import _unavailable

ROOT = Path(__file__).resolve().parents[1]

NEEDS_REDIS = {"drain.py"}
"""Benches that start a ``redis-server`` of their own: skipped without one (failed in CI, where
``SWITCHBOARD_REQUIRE_SERVICES=1``, as every test needing a service)."""

SMALL = {
    "replay_digest.py": ["--rounds", "1", "--per-round", "5"],
    "guard.py": ["--requests", "50", "--rounds", "1"],
    "intake.py": ["--runs", "3", "--kb", "5"],
    "cli_start.py": ["--runs", "1"],
    "wake.py": ["--deliveries", "20", "--rate", "200", "--burst", "1", "--burst-share", "0.02"],
    "processing.py": ["--deliveries", "40", "--batch", "8"],
    "receiver.py": ["--requests", "50", "--passes", "1"],
    "queue.py": ["--claimers", "2", "--todos", "40", "--sizes", "1000", "--no-postgres", "--runs", "1"],
    "drain.py": ["--deliveries", "40", "--workers", "1,2", "--runs", "1", "--no-postgres"],
}


@pytest.mark.timeout(900)  # a loaded 2-core machine: servers start in tens of seconds (CI)
@pytest.mark.parametrize("script", sorted(SMALL))
def test_bench_runs_at_a_tiny_size(script: str, tmp_path: Path) -> None:
    if script in NEEDS_REDIS and shutil.which("redis-server", path="/usr/bin:/bin") is None:
        _unavailable(f"bench/{script} needs redis-server in /usr/bin or /bin")
    proc = subprocess.run([sys.executable, "-P", str(ROOT / "bench" / script), *SMALL[script]], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SWITCHBOARD_HOME": str(tmp_path / "i")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), "a bench prints its figures"
