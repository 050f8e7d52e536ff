"""``deploy/`` (issue 14): the compose file parses, runs the four roles, and every command the
compose file and the systemd units run is a real ``switchboard`` command with real options."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import click
import yaml

from switchboard.cli import main

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def _check_command(argv: list[str]) -> None:
    """Resolve ``switchboard <group> <command> --option ...`` against the click tree."""
    assert Path(argv[0]).name == "switchboard", argv
    ctx = click.Context(main)
    cmd: click.Command = main
    args = argv[1:]
    while isinstance(cmd, click.Group):
        sub = cmd.get_command(ctx, args[0])
        assert sub is not None, f"no command {args[0]!r} in {argv}"
        cmd, args = sub, args[1:]
    known = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
    for arg in args:
        if arg.startswith("--"):
            assert arg in known, f"{argv}: unknown option {arg}"


def test_compose_runs_postgres_redis_migrate_web_worker_and_caddy() -> None:
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = doc["services"]
    assert set(services) == {"db", "redis", "migrate", "web", "worker", "caddy"}
    for name in ("migrate", "web", "worker"):
        _check_command(services[name]["command"])
        env = services[name]["environment"]
        assert env["SWITCHBOARD_DATABASE_URL"].startswith("postgresql://")
        assert env["SWITCHBOARD_REDIS_URL"].startswith("redis://") and env["PROMETHEUS_MULTIPROC_DIR"]
    assert services["web"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert "/api/v1/ready" in " ".join(services["web"]["healthcheck"]["test"])
    caddy = (DEPLOY / "Caddyfile").read_text()
    assert "lb_policy header mcp-session-id" in caddy and "flush_interval -1" in caddy


def test_systemd_units_run_real_commands() -> None:
    units = sorted((DEPLOY / "systemd").glob("*.service"))
    assert {u.name for u in units} >= {"switchboard-serve@.service", "switchboard-worker@.service",
                                      "switchboard-migrate.service"}
    for unit in units:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read(unit)
        exec_start = parser["Service"]["ExecStart"]
        argv = shlex.split(exec_start)
        if argv[0] == "/bin/sh":
            argv = shlex.split(argv[2])[1:]  # exec switchboard ...
        _check_command([a.replace("%i", "8080") for a in argv])
