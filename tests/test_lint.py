"""A name used but defined nowhere fails the suite, wherever it is (ruff's pyflakes rules F821,
F822 and F823). Found by a review: a refactor removed an import that one branch still used, and
every sweep then raised ``NameError`` after its first half, so quarantined deliveries were never
expired (6f54ec9); no test reached that line. The rest of ruff's rules are advice, not CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ["switchboard", "bench", "tools", "migrations", "tests", "app.py"]


def _undefined_names(*paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
         "--select", "F821,F822,F823", *paths],
        cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_no_name_is_used_without_being_defined() -> None:
    result = _undefined_names(*CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_finds_an_undefined_name(tmp_path: Path) -> None:
    # The check itself can fail: the fault it was added for is found.
    probe = tmp_path / "probe.py"
    probe.write_text("from datetime import datetime\n\n\ndef cutoff(days):\n    return datetime.now() - timedelta(days=days)\n")
    result = _undefined_names(str(probe))
    assert result.returncode == 1 and "F821" in result.stdout and "timedelta" in result.stdout
