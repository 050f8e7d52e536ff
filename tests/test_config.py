"""Settings.from_env: defaults, and every invalid value listed at once (DESIGN.md §7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchboard.config import Settings
from switchboard.errors import ConfigError


def test_defaults_are_embedded_sqlite_on_loopback(tmp_path: Path) -> None:
    s = Settings.from_env({"SWITCHBOARD_HOME": str(tmp_path)})
    assert s.is_sqlite and s.database_url == f"sqlite:///{tmp_path / 'switchboard.db'}"
    assert s.redis_url is None and s.host == "127.0.0.1" and s.port == 8080
    assert s.max_body_bytes == 25 * 1024 * 1024 and s.public_url == "http://127.0.0.1:8080"


def test_postgres_url_uses_psycopg3() -> None:
    s = Settings.from_env({"SWITCHBOARD_DATABASE_URL": "postgresql://u@h/db"})
    assert s.database_url == "postgresql+psycopg://u@h/db" and not s.is_sqlite


def test_every_problem_is_listed() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"SWITCHBOARD_DATABASE_URL": "mysql://x", "SWITCHBOARD_REDIS_URL": "http://x",
                           "SWITCHBOARD_MAX_BODY_BYTES": "lots", "SWITCHBOARD_PORT": "70000",
                           "SWITCHBOARD_PUBLIC_URL": "ftp://x"})
    assert len(info.value.problems) == 5
    assert "SWITCHBOARD_MAX_BODY_BYTES" in str(info.value)


def test_port_override_moves_default_public_url() -> None:
    s = Settings.from_env({}).with_overrides(port=9000)
    assert s.public_url == "http://127.0.0.1:9000"


def test_payload_budget_is_a_validated_setting() -> None:
    assert Settings.from_env({}).payload_budget_bytes == 64 * 1024
    assert Settings.from_env({"SWITCHBOARD_PAYLOAD_BUDGET_BYTES": "2048"}).payload_budget_bytes == 2048
    for bad in ("lots", "100", str(32 * 1024 * 1024)):
        with pytest.raises(ConfigError) as info:
            Settings.from_env({"SWITCHBOARD_PAYLOAD_BUDGET_BYTES": bad})
        assert "SWITCHBOARD_PAYLOAD_BUDGET_BYTES" in str(info.value)
