"""Ingest benchmark (DESIGN.md §8): verified deliveries acked per second, next to baselines.

Starts, on loopback, ``switchboard serve`` on a fresh SQLite instance (embedded: the
deliveries are processed into todos by its processing process while the load runs), a bare Flask endpoint returning 202
(through a2wsgi on uvicorn, as the hub mounts Flask) and a bare async route returning 202. Then
sends, over keep-alive connections, a bounded number of:

- verified 5 KB GitHub ``issues`` deliveries (``X-Hub-Signature-256``, unique delivery ids),
- verified Discord interactions (Ed25519 over timestamp + body, RFC 8032 test key),

and prints requests/s and p50/p99 ack latency for each, with the ratio to the baselines.

The embedded hub processes every delivery into a todo in its processing process (a child of
``serve`` with its own interpreter lock, ``SWITCHBOARD_PROCESSING=process``) while the load
runs, and that process shares SQLite's single writer with the receiver. To show the receiver's
own cost as well, a second hub on its own SQLite file hands jobs to a local ``redis-server``
with no worker running ("ack path only"); it is skipped when ``redis-server`` is missing.

Each run measures the bare async route and then the hub back to back, so every ratio compares
figures from the same run; the report gives medians over ``--runs``. During the hub's load a
separate connection polls ``/api/v1/health`` every 20 ms (the event-loop stall figure), and
after it the bench waits until every delivery is processed (the end-to-end rate).

Usage::

    .venv/bin/python bench/ingest.py [--requests 3000] [--connections 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parent.parent
# bench/queue.py would shadow the stdlib ``queue``: take this folder off the path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")  # RFC 8032 TEST 1
PUBLIC_KEY = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
GITHUB_SECRET = "bench-secret"


ACK_PATH = "ack path only (rq hand-off): GitHub 5 KB"
"""The row of the hub that hands jobs to Redis with no worker: the receiver and its writer alone."""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _configure(home: Path, settings: Any = None) -> tuple[str, str]:
    """Migrate the instance at ``home`` (or of ``settings``: PostgreSQL, ``bench/drain.py``); create
    alice (GitHub user 21031067, a Discord user), project acme, a GitHub and a Discord source and
    agent claude1 with work on acme; return the two sources' ids."""
    from switchboard import admin
    from switchboard.config import Settings
    from switchboard.db import upgrade
    from switchboard.hub import Hub
    from switchboard.intake import vault

    settings = settings or Settings(home=home)
    if not settings.vault_keys and not vault.key_file(settings).exists():
        # The throwaway instance's key ring, written here: made by the migrations, it would be
        # logged with a "back it up" warning in the bench's output.
        vault.write_key_file(vault.key_file(settings), vault.generate_key_ring())
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            admin.link_identity(s, "alice", "github", "21031067")
            admin.link_identity(s, "alice", "discord", "80351110224678912")
            admin.add_project(s, "acme")
            gh, _ = admin.add_source(s, "acme", "github", GITHUB_SECRET, queue="bench")
            dc, _ = admin.add_source(s, "acme", "discord", PUBLIC_KEY, queue="bench")
            admin.add_agent(s, "claude1", "alice")
            admin.grant(s, "claude1", "acme", "work")
        return gh.id, dc.id
    finally:
        hub.close()


def _request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1") + b"\r\n" + body


def github_requests(path: str, n: int, first: int = 0) -> list[bytes]:
    """``n`` verified 5 KB GitHub ``issues`` deliveries with unique delivery ids and bodies
    (an identical body is a duplicate by its digest, whatever its delivery id: issue 12 #7),
    numbered ``first`` .. ``first + n - 1`` (the issue number and title)."""
    out = []
    for i in range(first, first + n):
        payload = {
            "action": "opened",
            "issue": {"number": i, "node_id": uuid.uuid4().hex, "title": f"Bench issue {i}", "body": ""},
            "repository": {"full_name": "acme/api"},
            "sender": {"id": 21031067, "login": "octo"},
        }
        pad = 5120 - len(json.dumps(payload))
        payload["issue"]["body"] = "x" * pad
        body = json.dumps(payload).encode()
        sig = "sha256=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
        out.append(
            _request(
                path,
                body,
                {
                    "Content-Type": "application/json",
                    "X-GitHub-Event": "issues",
                    "X-GitHub-Delivery": str(uuid.uuid4()),
                    "X-GitHub-Hook-ID": "1",
                    "X-Hub-Signature-256": sig,
                },
            )
        )
    return out


def discord_requests(path: str, n: int) -> list[bytes]:
    """``n`` verified Discord slash-command interactions with unique ids."""
    key = Ed25519PrivateKey.from_private_bytes(SEED)
    out = []
    for i in range(n):
        body = json.dumps(
            {
                "id": str(10**17 + uuid.uuid4().int % 10**17),
                "type": 2,
                "application_id": "1",
                "member": {"user": {"id": "80351110224678912", "username": "nelly"}},
                "data": {"name": "review", "options": [{"name": "pr", "value": i}]},
            }
        ).encode()
        ts = str(int(time.time()))
        out.append(
            _request(
                path,
                body,
                {
                    "Content-Type": "application/json",
                    "X-Signature-Timestamp": ts,
                    "X-Signature-Ed25519": key.sign(ts.encode() + body).hex(),
                },
            )
        )
    return out


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return status


async def load(
    port: int, requests: list[bytes], connections: int
) -> tuple[float, list[float], dict[int, int]]:
    """Send every request over ``connections`` keep-alive connections.

    Returns:
        ``(elapsed seconds, latencies in seconds, {status: count})``.
    """
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for r in requests:
        queue.put_nowait(r)
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while not queue.empty():
                raw = queue.get_nowait()
                t0 = time.perf_counter()
                writer.write(raw)
                status = await _read_response(reader)
                latencies.append(time.perf_counter() - t0)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return time.perf_counter() - start, latencies, statuses


def checkout_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this checkout first on ``PYTHONPATH``: the ``switchboard`` console script
    imports the installed (editable) package otherwise, so a bench run from another worktree
    would start that package's ``serve``, not this checkout's."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)}


def _start(args: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """Start ``args`` and wait until ``port`` accepts (up to 180 s: under the full test suite a
    2-core machine took over 30 s to import and migrate). A process that exits first, or never
    listens, ends the bench with the tail of its stderr."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, env=checkout_env(env), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        started = time.monotonic()
        while time.monotonic() < started + 180 and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return proc
            except OSError:
                time.sleep(0.1)
        proc.kill()
        proc.wait()
        log.seek(0)
        tail = log.read()[-2000:].decode(errors="replace")
    raise SystemExit(f"server on port {port} did not start in {time.monotonic() - started:.0f} s "
                     f"(exit code {proc.returncode}): {' '.join(args)}\n{tail}")


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants. Each thread has its own children list: the processing
    process is started by serve's supervisor thread, so the main thread's list alone misses it."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:  # the thread ended meanwhile
            continue
        for child in children:
            try:
                found.extend(_tree(int(child)))
            except OSError:  # it exited meanwhile
                pass
    return found


def _summed(pid: int, one: Any) -> Any:
    """``one(pid)`` summed over ``pid`` and its descendants (one that exits meanwhile counts 0)."""
    total = 0
    for p in _tree(pid):
        try:
            total += one(p)
        except OSError:
            pass
    return total


def _stat_seconds(path: str) -> float:
    """CPU seconds (user + system) in a ``/proc/.../stat`` file (a process's or a thread's)."""
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants so far."""
    return _summed(pid, lambda p: _stat_seconds(f"/proc/{p}/stat"))


def _cpu_parts(root: int) -> dict[str, float]:
    """CPU seconds (user + system, ``/proc/<pid>/stat``) of ``root``'s main thread (``loop``),
    of ``root`` (``process``) and of its descendants (``children``); ``{}`` where ``/proc`` is
    missing (not Linux) or ``root`` has exited."""
    try:
        loop, process = _stat_seconds(f"/proc/{root}/task/{root}/stat"), _stat_seconds(f"/proc/{root}/stat")
        return {"loop": loop, "process": process, "children": _cpu_seconds(root) - process}
    except (OSError, ValueError, IndexError):
        return {}


def _measure(
    name: str, port: int, requests: list[bytes], connections: int, expect: set[int], health: bool = False,
    cpu_of: dict[str, int] | None = None,
) -> dict:
    """Warm up on the first 10 %, then time the rest; optionally poll ``/api/v1/health``
    every 20 ms on its own connection during the timed load (its p99 is the loop-stall figure).

    ``cpu_of`` (role -> pid of a server process): the CPU each spends per acked request during
    the timed load is returned under ``"cpu"`` in microseconds, with the load generator's own
    (this process: the client side of the loopback connections) and the event loop's thread."""
    warm = max(50, len(requests) // 10)
    asyncio.run(load(port, requests[:warm], connections))
    before = {role: _cpu_parts(pid) for role, pid in (cpu_of or {}).items()}
    client_before = time.process_time()

    async def timed() -> tuple[tuple[float, list[float], dict[int, int]], list[float], float]:
        health_lat: list[float] = []
        done = asyncio.Event()

        async def poll() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            raw = b"GET /api/v1/health HTTP/1.1\r\nHost: bench\r\n\r\n"
            try:
                while not done.is_set():
                    t0 = time.perf_counter()
                    writer.write(raw)
                    assert await _read_response(reader) == 200
                    health_lat.append(time.perf_counter() - t0)
                    await asyncio.sleep(0.02)
            finally:
                writer.close()

        poller = asyncio.create_task(poll()) if health else None
        began = time.perf_counter()
        result = await load(port, requests[warm:], connections)
        done.set()
        if poller is not None:
            await poller
        return result, health_lat, began

    (elapsed, lat, statuses), health_lat, began = asyncio.run(timed())
    client = time.process_time() - client_before
    cpu: dict[str, float] = {}
    for role, pid in (cpu_of or {}).items():
        after = _cpu_parts(pid)
        if not after or not before[role]:
            cpu = {}
            break
        per = 1e6 / max(1, len(lat))
        if role == "server":
            cpu["loop"] = (after["loop"] - before[role]["loop"]) * per
            cpu["server"] = (after["process"] - before[role]["process"]) * per
            cpu["children"] = (after["children"] - before[role]["children"]) * per
        else:
            cpu[role] = (after["process"] + after["children"] - before[role]["process"] - before[role]["children"]) * per
    if cpu:
        cpu["load generator"] = client * 1e6 / max(1, len(lat))
    if set(statuses) - expect:
        raise SystemExit(f"{name}: unexpected statuses {statuses}")
    lat.sort()
    health_lat.sort()
    return {
        "name": name,
        "n": len(lat),
        "rps": len(lat) / elapsed,
        "began": began,
        "p50": statistics.median(lat) * 1000,
        "p99": lat[int(len(lat) * 0.99) - 1] * 1000,
        "health_p99": health_lat[int(len(health_lat) * 0.99) - 1] * 1000 if health_lat else None,
        "cpu": cpu,
    }


def _wait_processed(home: Path, began: float, n: int, timeout: float = 600) -> float:
    """Seconds from ``began`` until no delivery is left ``received`` (embedded processing)."""
    import sqlite3

    conn = sqlite3.connect(home / "switchboard.db", timeout=30)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = conn.execute("SELECT count(*) FROM deliveries WHERE status = 'received'").fetchone()[0]
            if left == 0:
                return time.perf_counter() - began
            time.sleep(0.05)
    finally:
        conn.close()
    raise SystemExit(f"{n} deliveries were not processed within {timeout} s")


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="requests per target (after 10%% warm-up)")
    parser.add_argument("--connections", type=int, default=16, help="keep-alive connections")
    parser.add_argument("--runs", type=int, default=3, help="runs per target; medians are reported")
    parser.add_argument("--delivery-writer", choices=("process", "thread"), default="process",
                        help="SWITCHBOARD_DELIVERY_WRITER of both hubs (the writer's child process, or a thread)")
    parser.add_argument("--processing", choices=("process", "thread"), default="process",
                        help="SWITCHBOARD_PROCESSING of the embedded hub (processing in a child process, or a thread)")
    args = parser.parse_args()
    n = args.requests + max(50, args.requests // 10)

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "instance"
        gh_source, dc_source = _configure(home)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        env["SWITCHBOARD_HOME"] = str(home)
        env["SWITCHBOARD_DELIVERY_WRITER"] = args.delivery_writer
        env["SWITCHBOARD_PROCESSING"] = args.processing
        ports = {"hub": _port(), "flask": _port(), "async": _port(), "acks": _port(), "redis": _port()}
        exe = str(Path(sys.executable).with_name("switchboard"))
        uvicorn = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning"]
        procs = [
            _start([exe, "serve", "--port", str(ports["hub"])], env, ports["hub"]),
            _start(
                [*uvicorn, "--port", str(ports["flask"]), "bench.bare_apps:flask_app"], env, ports["flask"]
            ),
            _start(
                [*uvicorn, "--port", str(ports["async"]), "bench.bare_apps:async_app"], env, ports["async"]
            ),
        ]
        redis = shutil.which("redis-server")
        if redis:
            home2 = Path(tmp) / "acks"
            gh2, _ = _configure(home2)
            procs.append(
                _start(
                    [redis, "--port", str(ports["redis"]), "--save", "", "--appendonly", "no", "--dir", tmp],
                    env,
                    ports["redis"],
                )
            )
            env2 = {
                **env,
                "SWITCHBOARD_HOME": str(home2),
                "SWITCHBOARD_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
            }
            procs.append(_start([exe, "serve", "--port", str(ports["acks"])], env2, ports["acks"]))
        table: dict[str, list[dict]] = {}
        try:
            for _ in range(args.runs):
                # Each run: the bare route, then the hub, back to back (same machine state).
                rows = [
                    _measure(
                        "bare async route (Starlette), 5 KB",
                        ports["async"],
                        github_requests("/hooks/src_x", n),
                        args.connections,
                        {202},
                        cpu_of={"server": procs[2].pid},
                    ),
                    _measure(
                        "hub: verified GitHub 5 KB (embedded)",
                        ports["hub"],
                        github_requests(f"/hooks/{gh_source}", n),
                        args.connections,
                        {202},
                        health=True,
                        cpu_of={"server": procs[0].pid},
                    ),
                ]
                rows[1]["processed_rps"] = rows[1]["n"] / _wait_processed(
                    home, rows[1]["began"], rows[1]["n"]
                )
                rows.append(
                    _measure(
                        "hub: verified Discord Ed25519",
                        ports["hub"],
                        discord_requests(f"/hooks/{dc_source}", n),
                        args.connections,
                        {200},
                        cpu_of={"server": procs[0].pid},
                    )
                )
                _wait_processed(home, rows[2]["began"], rows[2]["n"])
                if redis:
                    rows += [
                        _measure(
                            ACK_PATH,
                            ports["acks"],
                            github_requests(f"/hooks/{gh2}", n),
                            args.connections,
                            {202},
                            health=True,
                            cpu_of={"server": procs[4].pid, "redis": procs[3].pid},
                        ),
                    ]
                bare = rows[0]["rps"]
                for r in rows:
                    r["ratio"] = r["rps"] / bare
                    if "processed_rps" in r:
                        r["processed_ratio"] = r["processed_rps"] / bare
                    table.setdefault(r["name"], []).append(r)
            flask = _measure(
                "bare Flask (a2wsgi on uvicorn), 5 KB",
                ports["flask"],
                github_requests("/hooks/src_x", n),
                args.connections,
                {202},
                cpu_of={"server": procs[1].pid},
            )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=10)

    print(
        f"ingest on {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}; a shared machine: "
        f"compare ratios), SQLite, delivery writer: {args.delivery_writer}, processing: {args.processing}, "
        f"{args.connections} connections, "
        f"{args.requests} distinct signed requests per target, medians of {args.runs} runs\n"
    )
    print(f"{'target':44} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'vs bare':>8} {'health p99':>11}")
    for name, rows in table.items():
        hp = _median(rows, "health_p99")
        print(
            f"{name:44} {_median(rows, 'rps'):7.0f} {_median(rows, 'p50'):7.2f} {_median(rows, 'p99'):7.2f} "
            f"{_median(rows, 'ratio'):8.0%} {'' if math.isnan(hp) else f'{hp:8.1f} ms':>11}"
        )
    print(
        f"{flask['name']:44} {flask['rps']:7.0f} {flask['p50']:7.2f} {flask['p99']:7.2f}   (one run, for reference)"
    )
    hub = table["hub: verified GitHub 5 KB (embedded)"]
    print("\ngoals (issue 11), each as a ratio to the bare async route measured in the same run:")
    for label, rows, what in (("verified ingest acked", hub, "embedded"),
                              ("the same, ack path only", table.get(ACK_PATH), "no processing beside it")):
        if rows:
            print(
                f"  {label:26} {_median(rows, 'ratio'):6.0%} of bare (goal >= 60 %), "
                f"p99 {_median(rows, 'p99'):.1f} ms (goal <= 25 ms); {what}, runs "
                + ", ".join(f"{r['ratio']:.0%}" for r in rows)
            )
    print(
        f"  processed end to end       {_median(hub, 'processed_ratio'):6.0%} of bare (goal >= 15 %), "
        f"{_median(hub, 'processed_rps'):.0f}/s vs {_median(hub, 'rps'):.0f}/s acked"
    )
    print(f"  health p99 under load      {_median(hub, 'health_p99'):6.1f} ms (goal <= 50 ms)")
    print(
        f"  bare async route baseline  {_median(table['bare async route (Starlette), 5 KB'], 'rps'):6.0f} req/s"
    )
    _print_cpu({**table, flask["name"]: [flask]})


def _print_cpu(table: dict[str, list[dict]]) -> None:
    """CPU per acked request by process (medians), and the rate the machine's cores would allow
    at that cost with every core busy (``cores x 1 s / total``), as a share of the bare route.

    ``total`` adds the roles' medians. The hub rows include the ``/api/v1/health`` poller's
    requests (50 a second, the bare row has none) and what the children did in the timed window
    (processing that fell behind the acks runs after it; the bench reports how far)."""
    bare = _median(table["bare async route (Starlette), 5 KB"], "rps")
    roles = ("loop", "server", "children", "redis", "load generator")
    rows = {name: {role: _median([{"v": r["cpu"].get(role)} for r in runs if r.get("cpu")], "v") for role in roles}
            for name, runs in table.items() if any(r.get("cpu") for r in runs)}
    if not rows:
        return
    cores = os.cpu_count() or 1
    print(f"\nCPU per acked request, microseconds (user + system from /proc, medians; {cores} cores):")
    print(f"{'target':44} {'loop':>6} {'server':>7} {'its children':>13} {'redis':>6} {'load gen':>9} "
          f"{'total':>6} {'cores allow':>12}")
    for name, cpu in rows.items():
        parts = [cpu[role] for role in ("server", "children", "redis", "load generator") if not math.isnan(cpu[role])]
        total = sum(parts)
        allow = cores * 1e6 / total if total else float("nan")
        cells = [f"{cpu[role]:{width}.0f}" if not math.isnan(cpu[role]) else " " * width
                 for role, width in (("loop", 6), ("server", 7), ("children", 13), ("redis", 6), ("load generator", 9))]
        print(f"{name:44} {' '.join(cells)} {total:6.0f} {allow / bare:12.0%}")
    print("(the loop is serve's event-loop thread, part of 'server'; 'its children' are the delivery writer and, "
          "embedded, the processing process; 'cores allow' is the share of the bare route's rate the machine "
          "could reach at this CPU per request with every core busy, the load generator included; over 100 % "
          "for the bare route, whose one event loop, not the cores, is its limit)")


if __name__ == "__main__":
    main()
