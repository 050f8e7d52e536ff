"""A Claude-Code-like client: raw JSON-RPC over a real ``switchboard channel`` process's stdio.

It speaks what Claude Code sends (``notes/mcp-and-channels.md``): ``initialize`` (handshake era,
2025-11-25), ``notifications/initialized``, ``tools/call``, and
``notifications/claude/channel/permission_request`` with snake_case params; it collects every
notification the adapter pushes (``notifications/claude/channel``,
``notifications/claude/channel/permission``). No SDK in between: the bytes on the wire are
what is tested. Waiting is on a condition variable with a timeout, never a fixed sleep.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import cli_env, switchboard_exe

PROTOCOL = "2025-11-25"
PERMISSION = "notifications/claude/channel/permission"
PERMISSION_REQUEST = "notifications/claude/channel/permission_request"


class ClaudeLike:
    """One adapter process and the JSON-RPC traffic with it.

    Args:
        url: the hub's base URL. token: the agent token (``SWITCHBOARD_TOKEN``).
        home: an instance folder for the adapter's environment; stderr goes to ``home/channel-N.log``.
    """

    _numbers = itertools.count(1)

    def __init__(self, url: str, token: str, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / f"channel-{next(self._numbers)}.log"
        self._log = self.log_path.open("wb")
        env = {**cli_env(home), "SWITCHBOARD_TOKEN": token, "SWITCHBOARD_LOG_LEVEL": "INFO"}
        self.proc = subprocess.Popen([switchboard_exe(), "channel", "--url", url], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log)
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self.responses: dict[int, dict[str, Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.stdout_garbage: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.stdout_garbage.append(line)  # the adapter must write only JSON-RPC to stdout
                continue
            with self._cond:
                if "id" in message and ("result" in message or "error" in message):
                    self.responses[int(message["id"])] = message
                elif "method" in message:
                    self.notifications.append(message)
                self._cond.notify_all()

    def send(self, message: dict[str, Any]) -> None:
        """Write one JSON-RPC message (one line)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def _wait(self, predicate: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = predicate()
                if found:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out; notifications so far: {self.notifications}\n"
                                         f"adapter log:\n{self.log_path.read_text(errors='replace')}")
                self._cond.wait(remaining)

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        """Send a request and return its response message."""
        rid = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        return self._wait(lambda: self.responses.get(rid), timeout)  # type: ignore[no-any-return]

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification."""
        self.send({"jsonrpc": "2.0", "method": method, "params": params or {}})

    def initialize(self) -> dict[str, Any]:
        """The handshake Claude Code does; returns the ``initialize`` result."""
        result = self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                             "clientInfo": {"name": "claude-code", "version": "2.1.0"}})["result"]
        self.notify("notifications/initialized")
        return result  # type: ignore[no-any-return]

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """``tools/call``; returns the raw result."""
        return self.request("tools/call", {"name": name, "arguments": arguments or {}}, timeout=95)["result"]  # type: ignore[no-any-return]

    def prompt(self, request_id: str, tool_name: str, description: str, input_preview: str) -> None:
        """Send a permission prompt as Claude Code does (snake_case params)."""
        self.notify(PERMISSION_REQUEST, {"request_id": request_id, "tool_name": tool_name,
                                         "description": description, "input_preview": input_preview})

    def wait_for(self, method: str, timeout: float = 20, **match: Any) -> dict[str, Any]:
        """The first notification of ``method`` whose params contain ``match``."""
        def found() -> dict[str, Any] | None:
            for n in self.notifications:
                params = n.get("params") or {}
                if n["method"] == method and all(params.get(k) == v for k, v in match.items()):
                    return params  # type: ignore[no-any-return]
            return None
        return self._wait(found, timeout)  # type: ignore[no-any-return]

    def received(self, method: str, **match: Any) -> list[dict[str, Any]]:
        """Every notification of ``method`` matching so far."""
        with self._cond:
            return [n["params"] for n in self.notifications if n["method"] == method
                    and all((n.get("params") or {}).get(k) == v for k, v in match.items())]

    def attached(self, timeout: float = 20) -> None:
        """Wait until the adapter's log says its stream is attached."""
        deadline = time.monotonic() + timeout
        while "attached to the hub's agent stream" not in self.log_path.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise AssertionError(self.log_path.read_text(errors="replace"))
            with self._cond:
                self._cond.wait(0.05)

    def close(self) -> int:
        """Close stdin (as Claude Code does on exit) and wait for the process."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        return code
