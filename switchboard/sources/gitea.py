"""Gitea and Forgejo webhooks (two providers, one module: Forgejo is a Gitea fork).

- Verification: bare hex HMAC-SHA256 in ``X-Gitea-Signature`` / ``X-Forgejo-Signature``
  (:mod:`switchboard.verifiers.gitea_signature`). The scheme is chosen by the source's
  provider; GitHub-style headers that Gitea also sends are ignored, never sniffed.
- Dedup key: ``X-Forgejo-Delivery`` / ``X-Gitea-Delivery`` (DESIGN.md §6.1).
- Bodies: JSON in GitHub's shapes (``sender``, ``repository``, ``issue``, ``pull_request``).
- Sender: ``sender.id`` in the workspace of the instance host (``repository.html_url``), since
  user ids are per instance: ``identity link --provider gitea --workspace codeberg.org``.

Sources: https://docs.gitea.com/usage/webhooks and https://forgejo.org/docs/latest/user/webhooks/
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument, MalformedRequest
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import (
    get,
    host_of,
    is_form,
    join_title,
    load_form,
    load_json_object,
    number,
    one_line,
    text,
)
from switchboard.sources.github import title_for
from switchboard.text import ascii_digits
from switchboard.verifiers import gitea_signature

_REVIEW_EVENTS = ("pull_request_approved", "pull_request_rejected", "pull_request_comment",
                  "pull_request_review_approved", "pull_request_review_rejected", "pull_request_review_comment")


class GiteaSource(BaseSource):
    """The Gitea / Forgejo adapter (see module docstring)."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.label = "Forgejo" if provider == "forgejo" else "Gitea"
        self.secret_help = f"a {self.label} webhook secret"

    def validate_secret(self, secret: str) -> None:
        """Free text, non-empty, printable, at most 256 characters.

        Raises:
            InvalidArgument: otherwise.
        """
        self.validate_free_text_secret(secret)

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """The numeric ``sender.id``; the workspace is the instance host.

        Raises:
            InvalidArgument: a non-numeric id or a missing workspace.
        """
        if not ascii_digits(external_id):
            raise InvalidArgument(f"a {self.label} external id is the numeric user id (sender.id)")
        if not workspace:
            raise InvalidArgument(f"{self.label} identities need --workspace: the instance host, e.g. codeberg.org")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify the Gitea/Forgejo signature headers (no timestamp in this scheme)."""
        gitea_signature.verify(body, headers, secrets)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """The delivery UUID header, or ``None``."""
        value = (headers.get("x-forgejo-delivery") or headers.get("x-gitea-delivery") or "").strip()
        return value[:200] or None

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified delivery (JSON, or a form with a ``payload`` field).

        Raises:
            MalformedPayload: the body is not a JSON object.
            MalformedRequest: ``X-Forgejo-Event`` and ``X-Gitea-Event`` disagree.
        """
        if is_form(headers):
            payload = load_json_object(load_form(body).get("payload", ""))
        else:
            payload = load_json_object(body)
        forgejo, gitea = headers.get("x-forgejo-event", "").strip(), headers.get("x-gitea-event", "").strip()
        if forgejo and gitea and forgejo != gitea:
            # Forgejo sends both with one value; unsigned headers that disagree are refused
            # rather than one of them guessed (issue 12 #7).
            raise MalformedRequest("X-Forgejo-Event and X-Gitea-Event disagree")
        event = one_line(forgejo or gitea or "unknown", 60)
        action = payload.get("action")
        action = one_line(action, 60) if isinstance(action, str) and action else None
        sender = self._sender(payload)
        repo = one_line(get(payload, "repository", "full_name") or "an unknown repository", 100)
        if event in _REVIEW_EVENTS:
            state = event.rsplit("_", 1)[1]
            title: str | None = join_title(
                f"Review ({state}) on PR{number(get(payload, 'pull_request', 'number'))} in {repo}",
                get(payload, "pull_request", "title"))
        else:
            title = title_for(event, action, payload)
        summary = None if title else one_line(f"{self.label} {event}{'.' + action if action else ''} in {repo}")
        return Envelope(event, action, payload, sender, title=title, summary=summary)

    def _sender(self, payload: Mapping[str, Any]) -> Sender | None:
        sid = text(get(payload, "sender", "id"))
        if sid is None:
            return None
        host = host_of(get(payload, "repository", "html_url")) or host_of(get(payload, "sender", "html_url"))
        login = text(get(payload, "sender", "login"))
        return Sender(self.provider, host, sid, login, is_bot=get(payload, "sender", "type") == "Bot")


GITEA = GiteaSource("gitea")
FORGEJO = GiteaSource("forgejo")
