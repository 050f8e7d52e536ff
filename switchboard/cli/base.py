"""What every ``switchboard`` command shares: the root group, settings, the hub, and the one
place output and errors are rendered.

Errors print ``error <code>: <message>`` on stderr and exit 2 (bad input) or 1 (other);
``--json`` prints ``{"error": {"code", "message"}}`` on stdout instead. Every command module
of this package registers on :data:`main` (or a group of its own added to it).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, NoReturn

import click

from switchboard import __version__
from switchboard.config import LOG_LEVELS, Settings
from switchboard.errors import ConfigError, SwitchboardError
from switchboard.text import readable


def fail(code: str, message: str, status: int, as_json: bool = False) -> NoReturn:
    """Print one error and exit: the only way a command reports a failure.

    Args:
        code: The error code (``SwitchboardError.code`` vocabulary, e.g. ``config_invalid``).
        message: One line for a human; never a secret.
        status: The process exit status: 2 for bad input or configuration, 1 otherwise.
        as_json: Print ``{"error": {"code", "message"}}`` on stdout instead of
            ``error <code>: <message>`` on stderr.

    Raises:
        SystemExit: Always, with ``status``.
    """
    if as_json:
        click.echo(json.dumps({"error": {"code": code, "message": message}}))
    else:
        click.echo(readable(f"error {code}: {message}", multiline=True), err=True)
    sys.exit(status)


def load_settings(served: bool = True) -> Settings:
    """Settings from the environment, or exit 2 with ``config_invalid`` listing every problem.

    With ``served`` and no ``SWITCHBOARD_PUBLIC_URL``, links (webhook URLs, login links, the
    health check of ``doctor``) use the address a running ``switchboard serve`` of this
    instance listens on (:func:`switchboard.instance.served_url`), not the default port.
    """
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        fail("config_invalid", str(exc), 2)
    if served and not os.environ.get("SWITCHBOARD_PUBLIC_URL", "").strip():
        from switchboard.instance import served_url

        url = served_url(settings)
        if url is not None:
            settings = settings.with_overrides(public_url=url)
    return settings


@contextmanager
def clear_errors(as_json: bool = False) -> Iterator[None]:
    """Turn expected failures into one line ``error <code>: <message>`` and an exit code.

    Exit 2 for bad input or configuration, 1 for an unreachable service or internal error.
    """
    import redis
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except SwitchboardError as exc:
        fail(exc.code, exc.message, 2 if exc.status < 500 else 1, as_json)
    except DBAPIError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        fail("dependency_unavailable", f"the database failed: {first[:300]}", 1, as_json)
    except redis.exceptions.RedisError as exc:
        fail("dependency_unavailable", f"cannot use Redis ({type(exc).__name__}: {str(exc)[:200]})", 1, as_json)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        fail("config_invalid", f"{exc.strerror or type(exc).__name__}{where}", 2, as_json)


def open_hub(migrate: bool = False) -> Any:
    """The CLI's hub. Only ``init`` and ``migrate`` upgrade the schema; every other command runs
    the cheap at-head check (:mod:`switchboard.schema`) and stops with exit 2 when no instance
    exists or the schema is behind."""
    from switchboard.hub import Hub

    settings = load_settings()
    if migrate:
        from switchboard.db import upgrade
        from switchboard.instance import hold_running_lock

        hold_running_lock(settings)  # no upgrade in the middle of a `migrate --to` (instance.py)
        upgrade(settings)
    else:
        from switchboard.schema import require_at_head

        require_at_head(settings)
    return Hub(settings, role="cli")


def emit(as_json: bool, data: dict[str, Any], text: str) -> None:
    """Print a command's result: ``data`` as indented JSON with ``--json``, else ``text``.

    The text is shown without terminal escapes, bidi overrides or invisible characters
    (:func:`switchboard.text.readable`): it quotes untrusted text (titles, prompts, sender
    names) that must not rewrite the operator's terminal. JSON escapes controls by itself.
    """
    click.echo(json.dumps(data, indent=2, default=str) if as_json else readable(text, multiline=True))


def admin(fn: Callable[..., tuple[dict[str, Any], str]]) -> Callable[..., None]:
    """Decorate a command that returns ``(data, text)``; adds ``--json`` and error rendering."""

    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    @wraps(fn)
    def wrapper(*args: Any, as_json: bool = False, **kwargs: Any) -> None:
        with clear_errors(as_json):
            data, text = fn(*args, **kwargs)
        emit(as_json, data, text)

    return wrapper


cursor_option = click.option(
    "--cursor", default=None, help="next_cursor of an earlier page (printed at its end): the page after it.")
"""``--cursor`` for every list command (issue 18 item 4: lists page, :mod:`switchboard.paging`)."""


def with_more(text: str, page: dict[str, Any]) -> str:
    """``text`` with a last line naming the cursor of the next page, when there is one."""
    if page.get("next_cursor"):
        return f"{text}\n(more: --cursor {page['next_cursor']})"
    return text


@click.group()
@click.version_option(__version__, prog_name="switchboard")
def main() -> None:
    """Switchboard: verified webhooks in, durable todos and channel wakes out."""
    from switchboard import logs

    level = os.environ.get("SWITCHBOARD_LOG_LEVEL", "WARNING").strip().upper() or "WARNING"
    fmt = os.environ.get("SWITCHBOARD_LOG_FORMAT", "").strip().lower() or "text"
    logs.configure(level if level in LOG_LEVELS else "WARNING", fmt if fmt in ("text", "json") else "text")
    from switchboard.log_redaction import install

    install()  # no payloads or credentials in any log (issue 13 item 6)
    if level not in LOG_LEVELS:
        load_settings()  # lists every invalid setting and exits 2
