"""Bench the whole intake check (channel-break rule + secrets to refs) on a 50 KB GitHub payload.

Usage: ``python bench/intake.py [--runs N] [--kb SIZE]``

The payload is the shared ``pull_request.opened`` case with its body grown to the given size with
ordinary Markdown (headings, lists, code with backslashes, HTML comments, links, a little
non-ASCII), so both the fast path and the full Unicode view are exercised the way real pull
requests do. Timed: ``screening.screen`` (every string, key, form field, the raw body, the
rendered title and wake; then the secret scan and replacement), and separately the same plus
``adapter.parse`` of the raw bytes. The first call (rule compilation) is excluded. Prints the
median and p99 in milliseconds, wall clock and thread CPU time (budget: median under 5 ms,
issue 4).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from switchboard.intake import screening  # noqa: E402
from switchboard.sources import adapter_for  # noqa: E402

CASE = ROOT / "tests" / "fixtures" / "cases" / "github" / "pull_request.opened.json"
PARAGRAPH = (
    "## Changes\n\n- Retry the upload when S3 answers `503 Slow Down` (see #482)\n"
    "- Keep `a < b` ordering stable; `x -> y` mapping in C:\\\\build\\\\out\n"
    "<!-- reviewers: please check the migration -->\n"
    "```python\nif retries < 5 and not done:\n    print(\"retrying\\n\")\n```\n"
    "Thanks to @octocat — café, naïve, 日本語 ✅ [docs](https://example.com/docs?page=2&lang=en)\n\n"
)


def payload_bytes(kb: int) -> bytes:
    """The case with ``pull_request.body`` grown until the JSON is about ``kb`` KiB."""
    payload = json.loads(CASE.read_bytes())
    base = len(json.dumps(payload).encode())
    need = max(0, kb * 1024 - base)
    payload["pull_request"]["body"] = (PARAGRAPH * (need // len(PARAGRAPH.encode()) + 1))[:need]
    return json.dumps(payload, ensure_ascii=False).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--kb", type=int, default=50)
    args = parser.parse_args()
    body = payload_bytes(args.kb)
    # GitHub always sends its delivery GUID; the adapter requires it (it is the dedup key).
    headers = {"x-github-event": "pull_request", "content-type": "application/json",
               "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
    adapter = adapter_for("github")
    envelope = adapter.parse(body, headers)
    first = time.perf_counter()
    result = screening.screen(body, headers, envelope, adapter, "reviews")
    warmup_ms = (time.perf_counter() - first) * 1000
    assert result.rejected is None and result.secrets == [], "the bench payload must be clean"

    def run(with_parse: bool) -> tuple[list[float], list[float]]:
        wall, cpu = [], []
        for _ in range(args.runs):
            t0, c0 = time.perf_counter(), time.thread_time()
            env = adapter.parse(body, headers) if with_parse else envelope
            screening.screen(body, headers, env, adapter, "reviews")
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
        return wall, cpu

    def stats(values: list[float]) -> str:
        values = sorted(values)
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        return f"median {statistics.median(values):6.2f} ms  p99 {p99:6.2f} ms"

    print(f"payload: {len(body)} bytes ({args.kb} KiB target), {args.runs} runs; first call {warmup_ms:.0f} ms")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time suffers under load; "
          "thread CPU time less so)")
    for label, with_parse in (("screen (both checks)", False), ("parse + screen", True)):
        wall, cpu = run(with_parse)
        print(f"{label:22s} wall {stats(wall)} | cpu {stats(cpu)}")


if __name__ == "__main__":
    main()
