"""The service fixtures give working PostgreSQL and Redis servers."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis

pytest_plugins = ["tests.services"]


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """Connect psycopg to a SQLAlchemy-style URL."""
    return psycopg.connect(urlunsplit(urlsplit(url)._replace(scheme="postgresql")))


def test_postgres_answers_select_1(postgres_url: str) -> None:
    with _connect(postgres_url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_postgres_url_is_for_sqlalchemy_psycopg(postgres_url: str) -> None:
    assert urlsplit(postgres_url).scheme == "postgresql+psycopg"


def test_fresh_database_is_new_empty_and_distinct(postgres_url: str) -> None:
    from tests.services import fresh_postgres_database

    first = fresh_postgres_database(postgres_url)
    second = fresh_postgres_database(postgres_url)

    assert first != second
    assert urlsplit(first).path != urlsplit(postgres_url).path
    with _connect(first) as conn:
        assert conn.execute("select current_database()").fetchone() == (urlsplit(first).path[1:],)
        tables = conn.execute(
            "select count(*) from information_schema.tables where table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)


def test_redis_answers_ping(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.ping() is True
        client.set("switchboard:test", b"1")
        assert client.get("switchboard:test") == b"1"
    finally:
        client.close()
