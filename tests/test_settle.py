"""``Hub.settle`` (issue 11): once start-up is done, the heap built so far leaves the garbage
collector's reach, so no full collection walks it again (a 74 ms pause in the processing
process every 1,600 deliveries or so). Run in a fresh interpreter: freezing is for the whole
process, and this one runs many apps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from switchboard.config import Settings
from tests.conftest import configure

_SCRIPT = """
import gc, json, sys
from pathlib import Path
from switchboard.config import Settings
from switchboard.hub import Hub
hub = Hub(Settings(home=Path(sys.argv[1])), role="worker")
before = gc.get_freeze_count()
hub.settle()
print(json.dumps({"before": before, "after": gc.get_freeze_count(), "warming": hub.warm_up.is_alive(),
                  "tracked": len(gc.get_objects())}))
hub.close()
"""


def test_settle_waits_for_the_intake_rules_and_freezes_the_start_up_heap(tmp_path: Path) -> None:
    configure(Settings(home=tmp_path))
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["before"] == 0 and not found["warming"]
    assert found["after"] > 50_000  # models, statements, intake rules: all out of the collector's walk
    assert found["tracked"] < found["after"] // 10
