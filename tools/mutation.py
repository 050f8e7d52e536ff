"""Mutation testing of the core with mutmut, one module group at a time (issue 17, docs/TESTING.md).

Usage (from the repository root, with the ``dev`` extra installed)::

    .venv/bin/python tools/mutation.py                  # every group, one after another
    .venv/bin/python tools/mutation.py verifiers leases # some groups
    .venv/bin/python tools/mutation.py --children 2 --budget 900 leases  # two workers, 15 min at most
    .venv/bin/python tools/mutation.py --list           # the groups, their code and their tests
    .venv/bin/python tools/mutation.py --survivors secrets  # survivors and unchecked again, new tests

Each group mutates only its own code and runs only the tests that exercise it (fast, in one
process): mutmut reads its settings from ``pyproject.toml`` in the working directory, so each
group runs in a scratch copy ``.mutation/<group>/`` (ignored by git) with a ``[tool.mutmut]``
section written for it. PostgreSQL and Redis are started once here and handed to the tests
through ``SWITCHBOARD_TEST_DATABASE_URL`` / ``SWITCHBOARD_TEST_REDIS_URL``, so a mutant's test
run does not start servers of its own. Runs under ``nice -n 10`` with one worker by default
(``--children``): the machine is shared.

Prints, per module, the mutants killed / the mutants with a verdict and the score, the
surviving mutants' names (``mutmut show NAME`` in the group's folder prints the diff), and the
wall-clock time; writes the same to ``.mutation/<group>/summary.json``. Not run in CI.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / ".mutation"


@dataclass(frozen=True)
class Group:
    """What one run mutates (globs under the repo) and which tests judge the mutants."""

    code: tuple[str, ...]
    tests: tuple[str, ...]
    names: tuple[str, ...] = ()  # fnmatch patterns of mutant names; empty = every function of ``code``
    services: bool = False  # PostgreSQL/Redis needed
    pytest_args: tuple[str, ...] = ()  # extra selection, e.g. one database of a parametrized fixture
    # Module-level caches ("module:attribute", each with ``clear()``) emptied before each
    # mutant's tests: mutmut forks every mutant's run from a process that has already run the
    # tests once (its stats), so a cache filled there would hide a mutant of the code that
    # fills it (e.g. a statement built once per shape) and the mutant would survive unseen.
    caches: tuple[str, ...] = ()


GROUPS: dict[str, Group] = {
    "verifiers": Group(("switchboard/verifiers/*",), ("tests/verifiers",)),
    # Only the dedup keys and the sender (attribution) extraction of each adapter; titles and
    # parsing are covered by the fault cases, not by this issue.
    "sources": Group(("switchboard/sources/*",), ("tests/sources", "tests/web/test_dedup_scoping.py"),
                     ("*dedup_key*", "*_sender*", "*normalize_identity*")),
    "attribution": Group(("switchboard/intake/attribution.py",),
                         ("tests/intake/test_attribution.py", "tests/intake/test_quarantine.py")),
    "secrets": Group(("switchboard/intake/secrets.py",), ("tests/intake/test_secrets.py",)),
    "screening": Group(("switchboard/intake/screening.py", "switchboard/intake/channel_break.py"),
                       ("tests/intake/test_channel_break.py", "tests/intake/test_pipeline.py")),
    "quarantine": Group(("switchboard/intake/quarantine.py",), ("tests/intake/test_quarantine.py",)),
    "vault": Group(("switchboard/intake/vault.py", "switchboard/sealing/*"),
                   ("tests/intake/test_vault.py", "tests/intake/test_sealed_text.py")),
    # The trailer's at-most-once machinery. The broker and wakes are reached by the MCP and
    # REST tests only (seconds per test), not measured here. Judged on SQLite, plus the
    # PostgreSQL tests SQLite cannot stand in for: the probe's named parameters, and the forced
    # race whose loser must deliver nothing (one writer on SQLite: a compare-and-set never loses).
    "notify": Group(("switchboard/notify/*",), ("tests/notify/test_trailer.py", "tests/notify/test_subscriptions.py",
                                                "tests/notify/test_trailer_race.py"),
                    ("switchboard.notify.trailer.*", "switchboard.notify.cursors.*",
                     "switchboard.notify.subscriptions.*"),
                    services=True, pytest_args=("-k", "not postgresql or at_most_once or loser_of_a_drain_race"),
                    caches=("switchboard.notify.trailer:_COMPILED",)),
    # The state machine's tests run on SQLite and PostgreSQL; a mutant is judged on SQLite (a fresh
    # migrated PostgreSQL database per test would cost seconds a test), plus the PostgreSQL tests
    # of what SQLite cannot show: the database's clock, the next-todo pick as a true scalar
    # subquery (several candidates) and its order at equal priority (SQLite's index returns ties
    # in id order anyway). A changed selection resets every verdict in mutmut: rename, don't add.
    "leases": Group(("switchboard/queue/leases.py", "switchboard/queue/lease_sql.py"), ("tests/queue/test_leases.py",), services=True,
                    pytest_args=("-k", "not postgresql or priority_then_oldest or on_postgres"),
                    caches=("switchboard.queue.lease_sql:STATEMENTS",)),
}


@contextmanager
def services() -> Iterator[dict[str, str]]:
    """A PostgreSQL and a Redis server for the whole run (tests/services.py, redis-server)."""
    sys.path.insert(0, str(ROOT))
    from tests.services import running_postgres

    env: dict[str, str] = {}
    with ExitStack() as stack:
        env["SWITCHBOARD_TEST_DATABASE_URL"] = stack.enter_context(running_postgres())
        redis_server = shutil.which("redis-server")
        if redis_server:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            proc = subprocess.Popen([redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no"], stdout=subprocess.DEVNULL)
            stack.callback(lambda: (proc.terminate(), proc.wait(10)))
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if proc.poll() is not None:
                        raise RuntimeError("redis-server exited") from None
                    time.sleep(0.05)
            env["SWITCHBOARD_TEST_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        yield env


def _toml_list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def prepare(name: str, group: Group) -> Path:
    """A scratch copy of the package and tests with this group's ``[tool.mutmut]``."""
    work = SCRATCH / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "switchboard", work / "switchboard", ignore=ignore)
    for extra in ("alembic.ini", "migrations"):
        src = ROOT / extra
        if src.is_dir():
            shutil.copytree(src, work / extra, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, work / extra)
    # ``-n 0``: the suite's ``addopts`` start xdist workers, whose calls mutmut's stats would not
    # see; no unraisableexception plugin: its two full garbage collections take 0.5 s of every run.
    pytest_args = ["-n", "0", "-p", "no:cacheprovider", "-p", "no:unraisableexception", "-x", "-q", *group.pytest_args]
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject += (
        "\n[tool.mutmut]\n"
        'source_paths = ["switchboard"]\n'
        f"only_mutate = {_toml_list(group.code)}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(group.tests)}\n"
        f"pytest_add_cli_args = {_toml_list(pytest_args)}\n"
        'also_copy = ["alembic.ini", "migrations"]\n'
    )
    (work / "pyproject.toml").write_text(pyproject)
    copy_tests(work, group)
    return work


def copy_tests(work: Path, group: Group) -> None:
    """The current tests into the scratch copy, with the group's cache-emptying fixture."""
    shutil.rmtree(work / "tests", ignore_errors=True)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if group.caches:
        with (work / "tests" / "conftest.py").open("a") as fh:
            fh.write(_FRESH_CACHES.format(caches=list(group.caches)))


_FRESH_CACHES = """

@pytest.fixture(scope="session", autouse=True)
def _mutation_fresh_caches() -> None:
    \"\"\"Written by tools/mutation.py: empty the caches a mutant's code would fill.\"\"\"
    import importlib

    for spec in {caches!r}:
        module, attribute = spec.split(":")
        getattr(importlib.import_module(module), attribute).clear()
"""


_KILLED = ("killed", "timeout", "caught by type check")
_MODULE = re.compile(r"^(?P<module>[\w.]+?)\.(?:x_|xǁ)")


def summarise(work: Path, names: tuple[str, ...] = ()) -> dict[str, dict[str, object]]:
    """``{module: {killed, total, score, survived: [names], other: {status: n}}}`` from mutmut."""
    out = subprocess.run([str(Path(sys.executable).with_name("mutmut")), "results", "--all", "true"],
                         cwd=work, capture_output=True, text=True, check=True).stdout
    per: dict[str, dict[str, object]] = defaultdict(
        lambda: {"killed": 0, "total": 0, "not_checked": 0, "survived": [], "other": {}})
    for line in out.splitlines():
        if ": " not in line:
            continue
        name, status = (p.strip() for p in line.rsplit(": ", 1))
        if names and not any(fnmatch.fnmatch(name, pattern) for pattern in names):
            continue  # outside this group's selection
        m = _MODULE.match(name)
        module = m.group("module") if m else name.rsplit(".", 1)[0]
        row = per[module]
        if status in ("not checked", "skipped"):
            row["not_checked"] = int(row.get("not_checked", 0)) + 1  # type: ignore[call-overload]
            continue
        row["total"] = int(row["total"]) + 1  # type: ignore[call-overload]
        if status in _KILLED:
            row["killed"] = int(row["killed"]) + 1  # type: ignore[call-overload]
        else:
            if status == "survived":
                row["survived"].append(name)  # type: ignore[union-attr]
            other = row["other"]
            other[status] = other.get(status, 0) + 1  # type: ignore[union-attr]
            if status != "survived":
                row["survived"].append(f"{name} ({status})")  # type: ignore[union-attr]
    for row in per.values():
        row["score"] = round(100 * int(row["killed"]) / int(row["total"]), 1) if row["total"] else None  # type: ignore[call-overload]
    return dict(sorted(per.items()))


def again(name: str, group: Group) -> tuple[Path, list[str]]:
    """The last run's scratch copy with today's tests, and its mutants without a kill (survivors,
    and those a budget left unchecked).

    Only tests may have changed since that run: mutmut keeps every verdict, and judges the
    named mutants again (new tests are mapped to functions first).

    Raises:
        SystemExit: no earlier run, or the group's code changed since (run the group in full).
    """
    work = SCRATCH / name
    if not (work / "mutants").is_dir():
        raise SystemExit(f"[{name}] no earlier run in {work}: run the group in full first")
    for pattern in group.code:
        for src in ROOT.glob(pattern):
            copy = work / src.relative_to(ROOT)
            if src.is_file() and (not copy.is_file() or copy.read_bytes() != src.read_bytes()):
                raise SystemExit(f"[{name}] {src.relative_to(ROOT)} changed since the last run: run the group in full")
    copy_tests(work, group)
    out = subprocess.run([str(Path(sys.executable).with_name("mutmut")), "results", "--all", "true"],
                         cwd=work, capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines():
        if ": " in line:
            name, status = (p.strip() for p in line.rsplit(": ", 1))
            if status not in _KILLED and (not group.names or any(fnmatch.fnmatch(name, p) for p in group.names)):
                names.append(name)  # survived, no tests, not checked (a budget ran out), ...
    return work, names


def run(name: str, group: Group, env: dict[str, str], children: int, budget: float | None,
        survivors: bool = False) -> dict[str, object]:
    """Mutate and judge the group in a fresh scratch copy; or, with ``survivors``, judge only the
    last run's mutants without a kill again with the current tests (:func:`again`)."""
    if survivors:
        work, names = again(name, group)
        if not names:  # mutmut run without names would judge every mutant
            print(f"[{name}] no survivors to judge again")
            return {"group": name, "modules": summarise(work, group.names)}
    else:
        work, names = prepare(name, group), list(group.names)
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    cmd = ["nice", "-n", "10", mutmut, "run", "--max-children", str(children), *names]
    started = time.monotonic()
    log = work / "mutmut.log"
    with log.open("a" if survivors else "w") as fh:
        try:
            proc = subprocess.run(cmd, check=False, cwd=work, env={**os.environ, **env}, stdout=fh,
                                  stderr=subprocess.STDOUT, timeout=budget)
            if proc.returncode != 0:
                print(f"[{name}] mutmut exited {proc.returncode}; see {log}", file=sys.stderr)
        except subprocess.TimeoutExpired:
            # mutmut saves each verdict as it comes: the rest are reported as not checked.
            print(f"[{name}] stopped after the {budget} s budget", file=sys.stderr)
    seconds = round(time.monotonic() - started, 1)
    modules = summarise(work, group.names)
    summary = {"group": name, "seconds": seconds, "survivors_only": survivors,
               "command": " ".join(cmd[3:]), "modules": modules}
    (work / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"== {name}: {seconds} s")
    for module, row in modules.items():
        unchecked = f" ({row['not_checked']} not checked)" if row.get("not_checked") else ""
        print(f"  {module:45} {row['killed']:>4}/{row['total']:<4} {row['score']}%{unchecked}")
        for s in row["survived"]:  # type: ignore[union-attr]
            print(f"      survived: {s}")
    return summary


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds the context managers: servers are stopped


def main() -> None:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("groups", nargs="*", choices=[*GROUPS, []], help="default: all, in order")
    parser.add_argument("--children", type=int, default=1, help="parallel mutant runs (default 1)")
    parser.add_argument("--list", action="store_true", help="print the groups and exit")
    parser.add_argument("--summary", action="store_true",
                        help="print the last run's results of the groups without running mutmut")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds per group; unchecked mutants are reported as such (default: none)")
    parser.add_argument("--survivors", action="store_true",
                        help="judge only the last run's survivors and unchecked mutants again, with the current "
                        "tests (the code must be unchanged since that run); the score covers every mutant")
    args = parser.parse_args()
    if args.list:
        for name, g in GROUPS.items():
            print(f"{name}: code {' '.join(g.code)} names {' '.join(g.names) or '*'}; tests {' '.join(g.tests)}")
        return
    names = args.groups or list(GROUPS)
    if args.summary:
        for name in names:
            if (SCRATCH / name / "mutants").is_dir():
                print(json.dumps({name: summarise(SCRATCH / name, GROUPS[name].names)}, indent=1))
        return
    need = any(GROUPS[n].services for n in names)
    with ExitStack() as stack:
        env = stack.enter_context(services()) if need else {}
        for name in names:
            run(name, GROUPS[name], env, args.children, args.budget, args.survivors)


if __name__ == "__main__":
    main()
