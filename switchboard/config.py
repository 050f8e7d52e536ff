"""Settings: one frozen object, built by entry points from the environment (DESIGN.md §7).

Only entry points (the CLI, ``app.py``, the rq worker) call :meth:`Settings.from_env`;
everything else takes a ``Settings``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from switchboard.errors import ConfigError
from switchboard.text import whole_number

DEFAULT_MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps deliveries at 25 MB
DEFAULT_PORT = 8080
DEFAULT_REST_MAX_BODY_BYTES = 1024 * 1024  # REST, tool and /mcp bodies (issue 13 item 2)
DEFAULT_PAYLOAD_BUDGET_BYTES = 64 * 1024  # todo payloads in tool results (issue 18 item 4)
MAX_PAYLOAD_BUDGET_BYTES = 16 * 1024 * 1024
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
PROCESSING_MODES = ("process", "thread")
"""``SWITCHBOARD_PROCESSING``: where embedded mode processes deliveries (see :class:`Settings`)."""
WRITER_MODES = ("process", "thread")
"""``SWITCHBOARD_DELIVERY_WRITER``: where ``serve`` writes received deliveries (see :class:`Settings`)."""


@dataclass(frozen=True)
class Settings:
    """Process settings.

    Attributes:
        home: the instance folder (``SWITCHBOARD_HOME``, default ``./instance``); holds the
            SQLite file and generated keys.
        database_url: SQLAlchemy URL (``SWITCHBOARD_DATABASE_URL``); default
            ``sqlite:///<home>/switchboard.db``. ``postgresql://`` URLs use psycopg 3.
        redis_url: ``SWITCHBOARD_REDIS_URL``; unset means inline jobs and an in-process broker.
        public_url: base URL printed for webhook endpoints (``SWITCHBOARD_PUBLIC_URL``);
            default ``http://<host>:<port>``.
        max_body_bytes: largest accepted webhook body in bytes (``SWITCHBOARD_MAX_BODY_BYTES``,
            default 25 MiB).
        host, port: where ``serve`` listens (``SWITCHBOARD_HOST``/``SWITCHBOARD_PORT``,
            default ``127.0.0.1:8080``).
        sweep_interval_seconds: how often stuck deliveries are re-processed (seconds).
        sweep_grace_seconds: how old a ``received`` delivery must be before the sweeper takes it.
        reap_interval_seconds: how often expired leases and due retries are returned (seconds).
        log_level: ``SWITCHBOARD_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR), default WARNING.
        vault_keys: the vault key ring (``SWITCHBOARD_VAULT_KEYS``): comma-separated
            ``<key id>:<32 bytes, url-safe base64>`` entries, the first one primary; ``None``
            means the ring in ``<home>/vault.keys`` (generated, mode 0600, on first use). Never
            shown in ``repr``.
        quarantine_days: how long a quarantined delivery waits for a human before it expires
            (``SWITCHBOARD_QUARANTINE_DAYS``, default 30).
        permission_expiry_seconds: how long a relayed permission prompt waits for a human, and
            how long an allowed one stays usable by ``friend_respond``
            (``SWITCHBOARD_PERMISSION_EXPIRY_SECONDS``, default 600: DESIGN.md §6.5a).
        notify_coalesce_seconds: per human, at most one prompt notification per this many
            seconds; prompts inside the window go out as one summary when it closes
            (``SWITCHBOARD_NOTIFY_COALESCE_SECONDS``, default 30).
        rest_max_body_bytes: largest body of a REST, tool or ``/mcp`` request in bytes
            (``SWITCHBOARD_REST_MAX_BODY_BYTES``, default 1 MiB); checked before reading.
        body_timeout_seconds: time allowed to receive a whole request body, counted from the
            request's headers (``SWITCHBOARD_BODY_TIMEOUT_SECONDS``, default 30); then 408.
        header_timeout_seconds: time allowed for a connection to send complete request headers,
            also the idle limit before the first request (``SWITCHBOARD_HEADER_TIMEOUT_SECONDS``,
            default 10).
        source_body_concurrency: bodies read at once for one source before verification
            (``SWITCHBOARD_SOURCE_BODY_CONCURRENCY``, default 16); more get 429 with ``Retry-After``.
        mcp_sessions_per_agent: open ``/mcp`` sessions one agent may hold
            (``SWITCHBOARD_MCP_SESSIONS_PER_AGENT``, default 16); more get 429 with ``Retry-After``.
        mcp_session_idle_seconds: an ``/mcp`` session with no request for this long is closed
            (``SWITCHBOARD_MCP_SESSION_IDLE_SECONDS``, default 600; the SDK's default is 1800).
        raw_body_days: days a settled delivery keeps its raw body for replay
            (``SWITCHBOARD_RAW_BODY_DAYS``, default 7; DESIGN.md §2).
        retention_days: days deliveries and feed events are kept (``SWITCHBOARD_RETENTION_DAYS``,
            default 90).
        metrics_token: bearer token required by ``GET /metrics`` (``SWITCHBOARD_METRICS_TOKEN``);
            ``None`` leaves it open. Never shown in ``repr``.
        log_format: ``text`` or ``json`` (``SWITCHBOARD_LOG_FORMAT``), for stderr logs.
        public_hosts: extra host names (``host`` or ``host:port``) that ``/mcp`` answers for
            besides loopback and the public URL's host (``SWITCHBOARD_PUBLIC_HOSTS``,
            comma-separated), e.g. every name a reverse proxy serves the hub under.
        trusted_proxies: addresses or CIDR networks of reverse proxies whose
            ``X-Forwarded-Host``, ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are honoured
            (``SWITCHBOARD_TRUSTED_PROXIES``, comma-separated; default none: the headers are
            ignored from everyone).
        payload_budget_bytes: the largest todo payload (and result) a tool or REST result
            carries whole, in bytes of canonical JSON (``SWITCHBOARD_PAYLOAD_BUDGET_BYTES``, default
            64 KiB, 1 KiB .. 16 MiB); over it the value is cut with an explicit marker and fetched
            in parts with ``todo_payload`` (DESIGN.md §6.5a, issue 18 item 4).
        processing: where embedded mode (no Redis) processes deliveries
            (``SWITCHBOARD_PROCESSING``): ``process``, a child process of ``serve`` with its own
            interpreter lock (the default from the environment, issue 11), or ``thread``, a thread
            of the serving process (the default when settings are built in code, e.g. by tests
            that inject a clock). Ignored with Redis: rq workers process then.
        delivery_writer: where ``serve`` stores received deliveries (``SWITCHBOARD_DELIVERY_WRITER``):
            ``process``, a child process of ``serve`` with its own interpreter lock (the default
            from the environment, issue 11: the event loop no longer shares its lock with the
            write transactions), or ``thread``, a thread of the serving process (the default
            when settings are built in code). Both databases, with or without Redis.
    """

    home: Path = field(default_factory=lambda: Path("instance"))
    database_url: str = ""
    redis_url: str | None = None
    public_url: str = ""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    sweep_interval_seconds: float = 15.0
    sweep_grace_seconds: float = 30.0
    reap_interval_seconds: float = 2.0
    log_level: str = "WARNING"
    vault_keys: str | None = field(default=None, repr=False)
    quarantine_days: int = 30
    permission_expiry_seconds: int = 600
    notify_coalesce_seconds: int = 30
    rest_max_body_bytes: int = DEFAULT_REST_MAX_BODY_BYTES
    body_timeout_seconds: int = 30
    header_timeout_seconds: int = 10
    source_body_concurrency: int = 16
    mcp_sessions_per_agent: int = 16
    mcp_session_idle_seconds: int = 600
    raw_body_days: int = 7
    retention_days: int = 90
    metrics_token: str | None = field(default=None, repr=False)
    log_format: str = "text"
    public_hosts: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    payload_budget_bytes: int = DEFAULT_PAYLOAD_BUDGET_BYTES
    processing: str = "thread"
    delivery_writer: str = "thread"

    def __post_init__(self) -> None:
        if self.processing not in PROCESSING_MODES:
            raise ValueError(f"processing must be one of {', '.join(PROCESSING_MODES)}, not {self.processing!r}")
        if self.delivery_writer not in WRITER_MODES:
            raise ValueError(f"delivery_writer must be one of {', '.join(WRITER_MODES)}, "
                             f"not {self.delivery_writer!r}")
        home = Path(self.home).expanduser().absolute()
        object.__setattr__(self, "home", home)
        if not self.database_url:
            # A URL's path is percent-decoded and cut at '?' (SQLAlchemy's URL rules): a home
            # whose name holds '%' or '?' must be quoted, or the ledger is opened elsewhere.
            path = str(home / "switchboard.db").replace("%", "%25").replace("?", "%3F")
            object.__setattr__(self, "database_url", f"sqlite:///{path}")
        url = self.database_url
        if url.startswith("postgresql://") or url.startswith("postgres://"):
            object.__setattr__(self, "database_url", "postgresql+psycopg://" + url.split("://", 1)[1])
        if not self.public_url:
            object.__setattr__(self, "public_url", f"http://{self.host}:{self.port}")
        object.__setattr__(self, "public_url", self.public_url.rstrip("/"))

    @property
    def is_sqlite(self) -> bool:
        """True when the ledger is an SQLite file (embedded mode)."""
        return self.database_url.startswith("sqlite")

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite ledger's file, as SQLAlchemy reads the URL (the part after ``sqlite:///`` up
        to a ``?``, percent-decoded); ``None`` for PostgreSQL, an in-memory database or a
        ``file:`` URI filename (refused in ``SWITCHBOARD_DATABASE_URL``)."""
        if not self.is_sqlite or "///" not in self.database_url:
            return None
        path = unquote(self.database_url.split("///", 1)[1].split("?", 1)[0])
        return Path(path) if path and path != ":memory:" and not path.startswith("file:") else None

    def with_overrides(self, **changes: object) -> Settings:
        """Return a copy with some fields replaced (derived defaults recomputed)."""
        if ("host" in changes or "port" in changes) and "public_url" not in changes:
            if self.public_url == f"http://{self.host}:{self.port}":
                changes["public_url"] = ""
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``SWITCHBOARD_*`` variables.

        Args:
            env: the environment to read (default ``os.environ``).

        Returns:
            The validated settings.

        Raises:
            ConfigError: listing every invalid value at once (DESIGN.md §7).
        """
        env = os.environ if env is None else env
        problems: list[str] = []

        def integer(name: str, default: int, low: int, high: int) -> int:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = int(raw)
            except ValueError:
                problems.append(f"{name}={raw!r} is not a whole number")
                return default
            if not low <= value <= high:
                problems.append(f"{name}={value} is out of range ({low}..{high})")
                return default
            return value

        home = Path(env.get("SWITCHBOARD_HOME", "").strip() or "instance")
        database_url = env.get("SWITCHBOARD_DATABASE_URL", "").strip()
        if database_url and not database_url.split("://", 1)[0].split("+", 1)[0] in (
            "sqlite",
            "postgresql",
            "postgres",
        ):
            problems.append(
                "SWITCHBOARD_DATABASE_URL must be a sqlite:/// or postgresql:// URL, "
                f"got scheme {database_url.split('://', 1)[0]!r}"
            )
            database_url = ""
        elif database_url.startswith("sqlite") and "///file:" in database_url:
            # pysqlite would open the URI, while backup, the revision check and the file modes
            # would look for a file literally named "file:..." (and create folders for it).
            problems.append("SWITCHBOARD_DATABASE_URL: give SQLite a file path (sqlite:////abs/path.db), "
                            "not a file: URI")
            database_url = ""
        redis_url = env.get("SWITCHBOARD_REDIS_URL", "").strip() or None
        if redis_url and urlsplit(redis_url).scheme not in ("redis", "rediss", "unix"):
            problems.append("SWITCHBOARD_REDIS_URL must be a redis://, rediss:// or unix:// URL")
            redis_url = None
        public_url = env.get("SWITCHBOARD_PUBLIC_URL", "").strip()
        if public_url and urlsplit(public_url).scheme not in ("http", "https"):
            problems.append("SWITCHBOARD_PUBLIC_URL must start with http:// or https://")
            public_url = ""
        max_body = integer("SWITCHBOARD_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024, 1 << 31)
        log_level = env.get("SWITCHBOARD_LOG_LEVEL", "").strip().upper() or "WARNING"
        if log_level not in LOG_LEVELS:
            problems.append(f"SWITCHBOARD_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
            log_level = "WARNING"
        if home.exists() and not home.is_dir():
            problems.append(f"SWITCHBOARD_HOME={str(home)!r} exists and is not a folder")
        host = env.get("SWITCHBOARD_HOST", "").strip() or "127.0.0.1"
        port = integer("SWITCHBOARD_PORT", DEFAULT_PORT, 0, 65535)
        vault_keys = env.get("SWITCHBOARD_VAULT_KEYS", "").strip() or None
        if vault_keys is not None:
            from switchboard.sealing.keys import parse_key_ring

            try:
                parse_key_ring(vault_keys)
            except ValueError as exc:
                problems.append(f"SWITCHBOARD_VAULT_KEYS: {exc}")
                vault_keys = None
        quarantine_days = integer("SWITCHBOARD_QUARANTINE_DAYS", 30, 1, 3650)
        permission_expiry = integer("SWITCHBOARD_PERMISSION_EXPIRY_SECONDS", 600, 10, 86_400)
        notify_coalesce = integer("SWITCHBOARD_NOTIFY_COALESCE_SECONDS", 30, 0, 3600)
        hardening = {
            "rest_max_body_bytes": integer("SWITCHBOARD_REST_MAX_BODY_BYTES", DEFAULT_REST_MAX_BODY_BYTES,
                                           1024, 1 << 30),
            "body_timeout_seconds": integer("SWITCHBOARD_BODY_TIMEOUT_SECONDS", 30, 1, 3600),
            "header_timeout_seconds": integer("SWITCHBOARD_HEADER_TIMEOUT_SECONDS", 10, 1, 600),
            "source_body_concurrency": integer("SWITCHBOARD_SOURCE_BODY_CONCURRENCY", 16, 1, 10_000),
            "mcp_sessions_per_agent": integer("SWITCHBOARD_MCP_SESSIONS_PER_AGENT", 16, 1, 10_000),
            "mcp_session_idle_seconds": integer("SWITCHBOARD_MCP_SESSION_IDLE_SECONDS", 600, 10, 86_400),
        }
        raw_body_days = integer("SWITCHBOARD_RAW_BODY_DAYS", 7, 0, 3650)
        payload_budget = integer("SWITCHBOARD_PAYLOAD_BUDGET_BYTES", DEFAULT_PAYLOAD_BUDGET_BYTES, 1024,
                                 MAX_PAYLOAD_BUDGET_BYTES)
        retention_days = integer("SWITCHBOARD_RETENTION_DAYS", 90, 1, 36500)
        if raw_body_days > retention_days:
            problems.append(f"SWITCHBOARD_RAW_BODY_DAYS={raw_body_days} is longer than "
                            f"SWITCHBOARD_RETENTION_DAYS={retention_days}")
        metrics_token = env.get("SWITCHBOARD_METRICS_TOKEN", "").strip() or None
        if metrics_token is not None and len(metrics_token) < 16:
            problems.append("SWITCHBOARD_METRICS_TOKEN must be at least 16 characters")
        log_format = env.get("SWITCHBOARD_LOG_FORMAT", "").strip().lower() or "text"
        if log_format not in LOG_FORMATS:
            problems.append(f"SWITCHBOARD_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
            log_format = "text"
        public_hosts = parse_public_hosts(env.get("SWITCHBOARD_PUBLIC_HOSTS", ""), problems)
        trusted_proxies = parse_trusted_proxies(env.get("SWITCHBOARD_TRUSTED_PROXIES", ""), problems)
        processing = env.get("SWITCHBOARD_PROCESSING", "").strip().lower() or "process"
        if processing not in PROCESSING_MODES:
            problems.append(f"SWITCHBOARD_PROCESSING must be one of {', '.join(PROCESSING_MODES)}")
            processing = "process"
        delivery_writer = env.get("SWITCHBOARD_DELIVERY_WRITER", "").strip().lower() or "process"
        if delivery_writer not in WRITER_MODES:
            problems.append(f"SWITCHBOARD_DELIVERY_WRITER must be one of {', '.join(WRITER_MODES)}")
            delivery_writer = "process"
        if problems:
            raise ConfigError(problems)
        return cls(
            home=home,
            database_url=database_url,
            redis_url=redis_url,
            public_url=public_url,
            max_body_bytes=max_body,
            host=host,
            port=port,
            log_level=log_level,
            vault_keys=vault_keys,
            quarantine_days=quarantine_days,
            permission_expiry_seconds=permission_expiry,
            notify_coalesce_seconds=notify_coalesce,
            **hardening,  # type: ignore[arg-type]
            raw_body_days=raw_body_days,
            retention_days=retention_days,
            metrics_token=metrics_token,
            log_format=log_format,
            public_hosts=public_hosts,
            trusted_proxies=trusted_proxies,
            payload_budget_bytes=payload_budget,
            processing=processing,
            delivery_writer=delivery_writer,
        )


_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"|\[[0-9A-Fa-f:.]{2,45}\]")


def sqlite_uri(path: str | os.PathLike[str], mode: str) -> str:
    """A URI for ``sqlite3.connect(uri, uri=True)`` opening the file ``path`` with ``mode``
    (``"ro"``, ``"rw"``): the absolute path's bytes percent-quoted, so a ``?``, ``#`` or ``%`` in a
    folder name, a path starting ``//`` or a name that is not UTF-8 stays the file's name
    (https://sqlite.org/uri.html)."""
    return f"file://{quote(os.fsencode(os.path.abspath(path)))}?mode={mode}"


def valid_host(value: str) -> bool:
    """``host`` or ``host:port`` as it appears in a ``Host`` header (DNS name, IPv4, ``[IPv6]``)."""
    host, sep, port = value.rpartition(":") if not value.endswith("]") else (value, "", "")
    if not sep:
        host, port = value, ""
    elif (number := whole_number(port, 5)) is None or not 0 < number < 65536:
        return False
    return len(host) <= 253 and _HOST.fullmatch(host) is not None


def parse_public_hosts(raw: str, problems: list[str]) -> tuple[str, ...]:
    """Parse ``SWITCHBOARD_PUBLIC_HOSTS``; a bad entry is added to ``problems``."""
    hosts = [h.strip().lower() for h in raw.split(",") if h.strip()]
    bad = [h for h in hosts if not valid_host(h)]
    if bad:
        problems.append(f"SWITCHBOARD_PUBLIC_HOSTS: {', '.join(repr(b) for b in bad[:5])} "
                        "is not a host name or host:port (no scheme, no path)")
        return ()
    return tuple(dict.fromkeys(hosts))


def parse_trusted_proxies(raw: str, problems: list[str]) -> tuple[str, ...]:
    """Parse ``SWITCHBOARD_TRUSTED_PROXIES`` (IP addresses or CIDR networks)."""
    out: list[str] = []
    for item in (x.strip() for x in raw.split(",")):
        if not item:
            continue
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            problems.append(f"SWITCHBOARD_TRUSTED_PROXIES: {item[:60]!r} is not an IP address or CIDR network")
            return ()
    return tuple(dict.fromkeys(out))
