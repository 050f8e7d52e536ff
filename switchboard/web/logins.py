"""Login links and web sessions for humans (DESIGN.md §5 "Humans", issue 15).

``switchboard login HUMAN`` makes a :class:`~switchboard.models.LoginLink` and prints
``<public URL>/ui/login/<token>``. Opening it shows a "Sign in" button; posting it redeems the
link (single use: one conditional update wins; ten minutes) and starts a
:class:`~switchboard.models.WebSession` whose token goes into the signed session cookie. Every
``/ui/`` request and the human stream resolve that token here; logout ends the row, so a copied
cookie dies with it, and every session ends :data:`SESSION_SECONDS` after sign-in.

Tokens are ``sbl_`` (link) and ``sbw_`` (session) + 32 random bytes, stored as SHA-256 only and
looked up by digest (no timing signal on the secret part). Every failure is one
:class:`~switchboard.errors.Unauthenticated` message: unknown, used, expired and ended links and
sessions look alike.
"""

from __future__ import annotations

import secrets as pysecrets
from datetime import timedelta

from sqlalchemy import select, update
from sqlmodel import Session

from switchboard import admin
from switchboard.clock import Clock
from switchboard.config import Settings
from switchboard.errors import Unauthenticated
from switchboard.models import Human, LoginLink, WebSession

LINK_PREFIX = "sbl_"
SESSION_PREFIX = "sbw_"
LOGIN_LINK_SECONDS = 600
SESSION_SECONDS = 12 * 3600
_MAX_TOKEN = 200


def create_link(session: Session, clock: Clock, human_name: str) -> str:
    """Make a one-time login link token for ``human_name`` (valid :data:`LOGIN_LINK_SECONDS`).

    Returns:
        The token (shown once; only its SHA-256 is stored).

    Raises:
        NotFound: no such human.
    """
    human = admin.human_by_name(session, human_name)
    token = LINK_PREFIX + pysecrets.token_urlsafe(32)
    now = clock.now()
    session.add(LoginLink(human_id=human.id, token_sha256=admin.token_digest(token), created_at=now,
                          expires_at=now + timedelta(seconds=LOGIN_LINK_SECONDS)))
    session.flush()
    return token


def link_url(settings: Settings, token: str) -> str:
    """The URL a human opens: ``<SWITCHBOARD_PUBLIC_URL>/ui/login/<token>``."""
    return f"{settings.public_url}/ui/login/{token}"


def _bad(kind: str) -> Unauthenticated:
    if kind == "link":
        return Unauthenticated("this login link is unknown, used or expired: run `switchboard login NAME` again")
    return Unauthenticated("sign in with a link from `switchboard login NAME`")


def link_is_live(session: Session, clock: Clock, token: str | None) -> bool:
    """True when ``token`` is an unused, unexpired link (for the confirmation page; no side effect)."""
    if not isinstance(token, str) or not token.startswith(LINK_PREFIX) or len(token) > _MAX_TOKEN:
        return False
    row = session.execute(select(LoginLink).where(
        LoginLink.token_sha256 == admin.token_digest(token))).scalars().first()
    return row is not None and row.used_at is None and row.expires_at > clock.now()


def redeem(session: Session, clock: Clock, token: str | None) -> tuple[str, Human]:
    """Use a login link once and start a web session.

    Returns:
        ``(session token, human)``; the token goes into the signed cookie.

    Raises:
        Unauthenticated: unknown, malformed, used or expired link (one message).
    """
    if not isinstance(token, str) or not token.startswith(LINK_PREFIX) or len(token) > _MAX_TOKEN:
        raise _bad("link")
    now = clock.now()
    digest = admin.token_digest(token)
    # One conditional update: of two redemptions racing, exactly one sees rowcount 1.
    used = session.execute(
        update(LoginLink).where(LoginLink.token_sha256 == digest, LoginLink.used_at.is_(None),  # type: ignore[union-attr]
                                LoginLink.expires_at > now)  # type: ignore[operator]
        .values(used_at=now).execution_options(synchronize_session=False)
    ).rowcount
    if used != 1:
        raise _bad("link")
    human_id = session.execute(select(LoginLink.human_id).where(LoginLink.token_sha256 == digest)).scalar_one()
    human = session.get(Human, human_id)
    assert human is not None
    web_token = SESSION_PREFIX + pysecrets.token_urlsafe(32)
    session.add(WebSession(human_id=human.id, token_sha256=admin.token_digest(web_token), created_at=now,
                           expires_at=now + timedelta(seconds=SESSION_SECONDS)))
    session.flush()
    return web_token, human


def authenticate(session: Session, clock: Clock, token: str | None) -> Human:
    """The human of a live web session.

    Raises:
        Unauthenticated: no, unknown, expired or ended session (one message).
    """
    if not isinstance(token, str) or not token.startswith(SESSION_PREFIX) or len(token) > _MAX_TOKEN:
        raise _bad("session")
    row = session.execute(
        select(Human).join(WebSession, WebSession.human_id == Human.id).where(
            WebSession.token_sha256 == admin.token_digest(token), WebSession.ended_at.is_(None),  # type: ignore[union-attr]
            WebSession.expires_at > clock.now())  # type: ignore[operator]
    ).scalars().first()
    if row is None:
        raise _bad("session")
    return row


def end(session: Session, clock: Clock, token: str | None) -> None:
    """Log out: end the web session of ``token`` (nothing happens for an unknown token)."""
    if isinstance(token, str) and len(token) <= _MAX_TOKEN:
        session.execute(update(WebSession).where(WebSession.token_sha256 == admin.token_digest(token),
                                                 WebSession.ended_at.is_(None))  # type: ignore[union-attr]
                        .values(ended_at=clock.now()).execution_options(synchronize_session=False))


def cookie_key(settings: Settings) -> bytes:
    """The key that signs session cookies: HKDF-SHA256 of the vault's primary key.

    Every ``serve`` process of one deployment shares the vault key ring, so they accept each
    other's cookies without a new setting; rotating the vault key signs everyone out.
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from switchboard.sealing.keys import load_key_ring

    ring = load_key_ring(settings)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=b"switchboard web session cookie").derive(ring.keys[ring.primary])
