"""``switchboard serve --port 0``: the system chooses the port, and serve says which."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import httpx2

from tests.conftest import cli, cli_env, stop, switchboard_exe


def test_serve_on_port_0_names_the_port_the_system_chose(tmp_path: Path) -> None:
    # A review: the banner read "on http://127.0.0.1:0", the source lines linked to port 0, and
    # CLI links went on naming 8080 while serve ran.
    env = cli_env(tmp_path / "inst")
    cli(env, "init")
    cli(env, "human", "add", "alice")
    cli(env, "project", "add", "acme", "--owner", "alice")
    src = cli(env, "source", "add", "--project", "acme", "--provider", "github")
    log_path = tmp_path / "serve.log"
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen([switchboard_exe(), "serve", "--port", "0"], env=env, stdout=log_file,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while f"/hooks/{src['id']}" not in (log := log_path.read_text(errors="replace")):
            assert proc.poll() is None, log
            assert time.monotonic() < deadline, log
            time.sleep(0.1)
        found = re.search(r"on http://127\.0\.0\.1:(\d+) ", log)
        assert found, log
        port = int(found.group(1))
        assert port != 0
        assert f"http://127.0.0.1:{port}/hooks/{src['id']}" in log
        assert httpx2.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=10).status_code == 200
        assert cli(env, "source", "show", src["id"])["url"] == f"http://127.0.0.1:{port}/hooks/{src['id']}"
        # A review: the app was built before the bind, so the web UI's hook URLs and MCP snippet
        # named port 0; serve now binds first and builds the app with the chosen port.
        base = f"http://127.0.0.1:{port}"
        with httpx2.Client(base_url=base, timeout=10) as browser:
            link = cli(env, "login", "alice")["url"]
            page = browser.get(link)
            csrf = page.text.split('name="csrf_token" value="')[1].split('"')[0]
            done = browser.post(link, data={"csrf_token": csrf}, headers={"Referer": f"{base}/ui/login"})
            assert done.status_code == 303, done.text
            sources = browser.get("/ui/sources").text
            assert f"{base}/hooks/{src['id']}" in sources and ":0/" not in sources
            agents = browser.get("/ui/agents").text
            assert f"&#34;{base}&#34;" in agents and ":0&#34;" not in agents  # the snippet's --url
    finally:
        stop(proc)
    assert not (tmp_path / "inst" / "serve.json").exists()  # forgotten when serve stops
