"""The ``switchboard`` command (click), one module per noun; entry point ``switchboard.cli:main``.

Rule: imports anything below it (hub, domain modules, web for ``serve``); nothing imports it.
Shared parts (root group, ``--json``, error exits) are in :mod:`switchboard.cli.base`; a new
command goes in its noun's module, and a new module is added to the import list below.
"""

from __future__ import annotations

from switchboard.cli import (  # noqa: F401  (each registers its commands on main)
    agents,
    deliveries,
    humans,
    inbox,
    ops,
    projects,
    serve,
    sources,
    todos,
    vault,
)
from switchboard.cli.base import main

__all__ = ["main"]
