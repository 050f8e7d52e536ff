"""A new user's run of the README (issue 14): from a clean clone, the Quick start, the first local
test (a claim and a complete included) and the MCP client example run, and print what the README
says they print.

What differs from a person at a terminal, on purpose:
- the clone's virtualenv reuses this environment's installed dependencies (a ``.pth`` file) and
  installs the clone itself with ``pip install --no-deps -e`` (the same pinned versions, without
  downloading them again);
- the port is a free one instead of 8080 (other things may listen there): ``8080`` in the
  README's commands and outputs is replaced by it, through ``SWITCHBOARD_PORT``;
- ``switchboard serve`` runs in the background until the test ends;
- ``SRC=src_... SECRET=...`` gets the values ``source add`` printed, ``TOKEN=sbk_...`` the token
  ``token vend`` printed, ``TODO=td_... LEASE=...`` the todo id and lease token of the claim.

Expected output is every ``#   `` line under a command; ``...`` matches anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx2

from tests.conftest import free_port, stop, wait_for

ROOT = Path(__file__).resolve().parent.parent


def _block(readme: str, heading: str, lang: str = "sh") -> list[str]:
    """The lines of the first ``lang`` code block after ``heading``."""
    after = readme.split(heading, 1)[1]
    return after.split(f"```{lang}\n", 1)[1].split("```", 1)[0].splitlines()


def _steps(lines: list[str]) -> list[tuple[str, list[str]]]:
    """``[(command, expected output lines)]``; a trailing ``# comment`` is not part of a command."""
    steps: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("#   "):
            steps[-1][1].append(line[4:].strip())
        elif line.strip() and not line.startswith("#"):
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            steps.append((command, []))
    return steps


def _pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in expected.split("...")))


def _printed(output: str, expected: str) -> bool:
    """Some line of ``output`` is ``expected`` (``...`` matching anything)."""
    return any(_pattern(expected).fullmatch(got.strip()) for got in output.splitlines())


def _clone_with_venv(tmp_path: Path) -> tuple[Path, Path]:
    clone = tmp_path / "switchboard"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "_reuse_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-e", str(clone)],
                   check=True, timeout=600, capture_output=True)
    return clone, venv


def test_readme_quick_start_first_local_test_and_mcp_example_from_a_clean_clone(tmp_path: Path) -> None:
    clone, venv = _clone_with_venv(tmp_path)
    readme = (clone / "README.md").read_text()
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWITCHBOARD_", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", SWITCHBOARD_PORT=port, VIRTUAL_ENV=str(venv))
    assert shlex.split(_block(readme, "## Quick start")[0])[:3] == ["python3", "-m", "venv"]

    outputs: dict[str, str] = {}
    assignments: list[str] = []
    server = None
    try:
        for command, expected in _steps(_block(readme, "## Quick start")[2:] + _block(readme, "### A first local test")
                                     + _block(readme, "A ping becomes a feed event only")
                                     + _block(readme, "An agent claims it, gets a lease")):
            command = command.replace("8080", port)
            expected = [e.replace("8080", port) for e in expected]
            if command == "switchboard serve":
                log = tmp_path / "serve.log"
                server = subprocess.Popen(["bash", "-c", command], cwd=clone, env=env,
                                          stdout=log.open("wb"), stderr=subprocess.STDOUT)
                wait_for(lambda server=server: _healthy(port, server), timeout=60, interval=0.2)
                # The source URLs are listed (a database read in a thread) after the banner, while
                # serve already answers: wait for the lines, not only for the health check.
                with contextlib.suppress(AssertionError):  # the check below names the missing line
                    wait_for(lambda log=log, expected=expected: all(_printed(log.read_text(), line) for line in expected),
                             timeout=30, interval=0.2)
                output = log.read_text()
            elif command.startswith("SRC=src_..."):
                src = re.search(r"^source (src_\w+)$", outputs["source add"], re.MULTILINE).group(1)
                secret = re.search(r"^secret \(shown once\): (\S+)$", outputs["source add"], re.MULTILINE).group(1)
                assignments.append(f"SRC={src} SECRET={shlex.quote(secret)}")
                continue
            elif command.startswith("TOKEN=sbk_..."):
                assignments.append(f"TOKEN={outputs['token vend'].strip()}")
                continue
            elif command.startswith("TODO=td_..."):
                claim = json.loads(output)  # the claim's answer, the step before
                assignments.append(f"TODO={claim['todo']['id']} LEASE={shlex.quote(claim['lease_token'])}")
                continue
            elif re.match(r"^[a-z]+=", command):
                assignments.append(command)
                continue
            else:
                script = "; ".join([*assignments, command])
                proc = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True,
                                      timeout=120, check=False)
                assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
                output = proc.stdout + proc.stderr
            outputs[" ".join(command.split()[1:3])] = output
            for line in expected:
                assert _printed(output, line), \
                    f"`{command}` did not print `{line}`:\n{output}"
        assert (clone / "instance" / "switchboard.db").exists()  # the documented ./instance

        token = outputs["token vend"].strip()
        example = "\n".join(_block(readme, "Other MCP clients", "python"))
        proc = subprocess.run([str(venv / "bin" / "python"), "-c", example], cwd=clone, timeout=120,
                              capture_output=True, text=True,
                              env={**env, "SWITCHBOARD_URL": f"http://127.0.0.1:{port}", "SWITCHBOARD_TOKEN": token}, check=False)
        assert proc.returncode == 0, proc.stderr
        first, second = proc.stdout.strip().splitlines()
        assert first.startswith("['") and second.startswith("False {'todos': [")
    finally:
        if server is not None:
            stop(server)


def _healthy(port: str, server: subprocess.Popen[bytes]) -> bool:
    assert server.poll() is None, "serve exited"
    try:
        return httpx2.get(f"http://127.0.0.1:{port}/api/v1/ready", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False
