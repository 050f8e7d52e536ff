"""What every page of the web UI shares: the blueprint, CSRF, the sign-in guard and the scope
helpers (:func:`hub`, :func:`owned_project`, :func:`write_session`). Page modules import this one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from flask import Blueprint, current_app, g, redirect, render_template, request, session, url_for
from flask_wtf.csrf import CSRFError, CSRFProtect
from sqlalchemy import select

from switchboard import admin
from switchboard.errors import SwitchboardError, Unauthenticated
from switchboard.models import Project
from switchboard.web import logins

if TYPE_CHECKING:
    from sqlmodel import Session

    from switchboard.hub import Hub

bp = Blueprint("ui", __name__, url_prefix="/ui", template_folder="../templates",
               static_folder="../static", static_url_path="/static")
csrf = CSRFProtect()
_OPEN = {"ui.login_help", "ui.login_link", "ui.login_redeem", "ui.static"}


def hub() -> Hub:
    """The process hub."""
    return current_app.config["HUB"]  # type: ignore[no-any-return]


@bp.before_request
def _guard() -> Any:
    if request.method == "POST":
        csrf.protect()
    if request.endpoint in _OPEN:
        return None
    try:
        with hub().db.read() as s:
            human = logins.authenticate(s, hub().clock, session.get("sid"))
            g.human = human
            g.owned = admin.owned_projects(s, human.id)
            g.projects = dict(s.execute(select(Project.id, Project.name).where(
                Project.id.in_(g.owned)).order_by(Project.name)).all()) if g.owned else {}  # type: ignore[attr-defined]
    except Unauthenticated:
        session.pop("sid", None)
        return redirect(url_for("ui.login_help"), code=303)
    return None


@bp.after_request
def _no_store(resp: Any) -> Any:
    # Pages carry per-human data and, once, tokens and secrets: never cached or stored.
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Referrer-Policy"] = "same-origin"
    return resp


@bp.app_template_filter("when")
def when(value: Any) -> str:
    """A UTC time (``datetime`` or ISO 8601 text) as ``2026-12-01 09:30:05 UTC``; '' for none."""
    if value in (None, ""):
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    return str(value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))


@bp.errorhandler(SwitchboardError)
def _on_error(exc: SwitchboardError) -> Any:
    return render_template("ui/error.html", code=exc.code, message=exc.message), exc.status


@bp.errorhandler(CSRFError)
def _on_csrf(exc: CSRFError) -> Any:
    return render_template("ui/error.html", code="csrf_failed",
                           message=f"The form was refused ({exc.description}). Reload the page and try again."), 400


def write_session() -> Any:
    """``hub().db.write()``: one write transaction for an action."""
    return hub().db.write()


def owned_project(s: Session, ref: str | None) -> str:
    """The id of an owned project given its id or name.

    Raises:
        NotFound: unknown or not owned (the same answer).
    """
    from switchboard.errors import NotFound

    for pid, name in g.projects.items():
        if ref in (pid, name):
            return pid
    raise NotFound("no such project")


@bp.get("/")
def home() -> Any:
    """``/ui/`` lands on the inbox."""
    return redirect(url_for("ui.inbox_page"))


@bp.get("/login")
def login_help() -> Any:
    """How to sign in (where every unauthenticated ``/ui/`` request lands)."""
    return render_template("ui/login.html", link_ok=None)


@bp.get("/login/<token>")
def login_link(token: str) -> Any:
    """The page a login link opens: a "Sign in" button (a GET never uses the link, so link
    previews and prefetchers cannot spend it)."""
    with hub().db.read() as s:
        ok = logins.link_is_live(s, hub().clock, token)
    return render_template("ui/login.html", link_ok=ok, token=token), 200 if ok else 401


@bp.post("/login/<token>")
def login_redeem(token: str) -> Any:
    """Use the link once, start the session, land on the inbox."""
    try:
        with write_session() as s:
            web_token, _ = logins.redeem(s, hub().clock, token)
    except Unauthenticated:
        return render_template("ui/login.html", link_ok=False, token=token), 401
    session.clear()  # a fresh session (and CSRF token) for the signed-in human
    session["sid"] = web_token
    session.permanent = True
    return redirect(url_for("ui.inbox_page"), code=303)


@bp.post("/logout")
def logout() -> Any:
    """End the web session here and in the database."""
    with write_session() as s:
        logins.end(s, hub().clock, session.get("sid"))
    session.clear()
    return redirect(url_for("ui.login_help"), code=303)

