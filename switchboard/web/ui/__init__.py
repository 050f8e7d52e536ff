"""The human web UI under ``/ui/`` (DESIGN.md §3, §5; issue 15).

Server-rendered Jinja pages; every action is a plain HTML form (POST, CSRF token from Flask-WTF's
``CSRFProtect``) that works without JavaScript. The only script is ``static/ui.js``: the feed's
live updates over the browser's ``EventSource`` and copy buttons.

Sign-in: ``switchboard login NAME`` prints a one-time link (:mod:`switchboard.web.logins`);
the session cookie (signed, ``HttpOnly``, ``SameSite=Lax``, ``Secure`` when the public URL is
https) carries the web session token. Every page and action resolves the signed-in human first;
a request without a live session is redirected to ``/ui/login``, which explains how to sign in.

Scope: a human sees and acts on the projects they own and the agents and inbox items that are
theirs, with the same checks as the REST routes (an item out of scope is ``not_found``, the same
answer as an unknown one). Actions call the same domain functions as the CLI and REST.

Pages: :mod:`.inbox`, :mod:`.work` (quarantine, todos, feed), :mod:`.setup` (sources, agents).

Rule: imports the domain modules (``admin``, ``inbox``, ``queue``, ``intake``, ``feed``) and
:mod:`switchboard.web.logins`; imported only by :mod:`switchboard.web.flask_app`. A new page
module imports :mod:`switchboard.web.ui.base`, adds routes to its ``bp``, and is added to the
import below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from switchboard.web import logins
from switchboard.web.ui import inbox, setup, work  # noqa: F401  (routes register on bp)
from switchboard.web.ui.base import bp, csrf

if TYPE_CHECKING:
    from flask import Flask

    from switchboard.hub import Hub


def install(app: Flask) -> None:
    """Configure sessions and CSRF on ``app`` and register the UI blueprint.

    CSRF is checked for the UI's forms only (``WTF_CSRF_CHECK_DEFAULT`` off, checked in this
    blueprint's ``before_request``): the REST API authenticates with bearer tokens, not cookies.
    """
    hub: Hub = app.config["HUB"]
    app.config.update(
        SECRET_KEY=logins.cookie_key(hub.settings),
        SESSION_COOKIE_NAME="switchboard_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=urlsplit(hub.settings.public_url).scheme == "https",
        SESSION_COOKIE_PATH="/",
        PERMANENT_SESSION_LIFETIME=logins.SESSION_SECONDS,
        WTF_CSRF_CHECK_DEFAULT=False,
        WTF_CSRF_TIME_LIMIT=logins.SESSION_SECONDS,
        WTF_CSRF_SSL_STRICT=True,
    )
    csrf.init_app(app)
    app.register_blueprint(bp)
