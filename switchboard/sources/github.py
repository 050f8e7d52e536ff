"""GitHub webhooks.

- Verification: ``X-Hub-Signature-256`` (:mod:`switchboard.verifiers.hub_signature`).
- Dedup key: ``X-GitHub-Hook-ID`` + ``X-GitHub-Delivery`` (DESIGN.md §6.1; a delivery id can
  repeat across hooks, webhook-faults.md #6).
- Bodies: ``application/json``, or ``application/x-www-form-urlencoded`` with the JSON in the
  ``payload`` field (webhook-faults.md #3).
- Sender: ``sender.id`` (stable), bot when ``sender.type == "Bot"``.

Source: https://docs.github.com/en/webhooks/webhook-events-and-payloads
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument, MalformedPayload, MalformedRequest
from switchboard.sources import BaseSource, Envelope, Sender
from switchboard.sources.bodies import TITLE_MAX_CHARS, is_form, load_form, load_json_object, one_line
from switchboard.verifiers import hub_signature

__all__ = ["ADAPTER", "TITLE_MAX_CHARS", "GitHubSource", "load_json_object", "one_line", "title_for"]

_EVENT = re.compile(r"[a-z][a-z0-9_]{0,59}")


class GitHubSource(BaseSource):
    """The GitHub adapter (see module docstring)."""

    provider = "github"

    secret_help = "a GitHub webhook secret"

    def validate_secret(self, secret: str) -> None:
        """GitHub secrets are free text; refuse empty or whitespace-padded ones.

        Raises:
            InvalidArgument: the secret is empty, padded, or over 256 characters.
        """
        if not secret or secret.strip() != secret:
            raise InvalidArgument("a GitHub webhook secret must be non-empty, without surrounding spaces")
        if len(secret) > 256:
            raise InvalidArgument("a GitHub webhook secret must be at most 256 characters")

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """A GitHub identity is the numeric ``sender.id``, with no workspace.

        Raises:
            InvalidArgument: a login instead of the id, or a workspace given.
        """
        if not external_id.isdigit():
            raise InvalidArgument("a GitHub external id is the numeric user id (sender.id), not the login")
        if workspace:
            raise InvalidArgument("GitHub identities have no workspace")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock) -> None:
        """Verify ``X-Hub-Signature-256`` over the raw bytes (GitHub has no timestamp)."""
        hub_signature.verify(body, headers.get("x-hub-signature-256"), secrets)

    def verify_source(self, source: Any, body: bytes, headers: Mapping[str, str], secrets: Sequence[str],
                      clock: Clock) -> None:
        """As :meth:`verify`; a source with ``allow_legacy_sha1`` also accepts a request that
        carries only the legacy ``X-Hub-Signature`` (SHA-1). SHA-256 wins when both are sent."""
        if getattr(source, "allow_legacy_sha1", False) and not headers.get("x-hub-signature-256") \
                and headers.get("x-hub-signature"):
            hub_signature.verify_sha1(body, headers.get("x-hub-signature"), secrets)
            return
        self.verify(body, headers, secrets, clock)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """SHA-256 of (hook id, delivery guid): fixed length, no collisions between the two parts.

        ``parse`` has already required ``X-GitHub-Delivery``.
        """
        delivery = headers.get("x-github-delivery", "").strip()
        if not delivery:
            return None
        hook = headers.get("x-github-hook-id", "").strip()
        return "github:" + hashlib.sha256(json.dumps([hook, delivery]).encode("utf-8")).hexdigest()

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified delivery into an :class:`Envelope` with its title.

        Raises:
            MalformedRequest: ``X-GitHub-Event`` is not an event name, or ``X-GitHub-Delivery`` is
                missing (GitHub always sends both).
            MalformedPayload: the body or its ``payload`` field is not a strict JSON object, the
                form has other fields, or ``action`` is not an action name.
        """
        event = headers.get("x-github-event", "").strip()
        if not _EVENT.fullmatch(event):
            raise MalformedRequest("X-GitHub-Event must be a GitHub event name (lowercase letters, digits, '_')")
        delivery = headers.get("x-github-delivery", "").strip()
        if not delivery or len(delivery) > 200:
            raise MalformedRequest("X-GitHub-Delivery is required (GitHub's delivery GUID, at most 200 characters)")
        if is_form(headers):
            fields = load_form(body)
            if "payload" not in fields:
                raise MalformedPayload("form body has no 'payload' field")
            if len(fields) > 1:
                raise MalformedPayload("form body must hold exactly one field, 'payload'")
            payload = load_json_object(fields["payload"])
        else:
            payload = load_json_object(body)
        action = payload.get("action")
        if action is not None and not (isinstance(action, str) and _EVENT.fullmatch(action)):
            raise MalformedPayload("'action' must be a GitHub action name (lowercase letters, digits, '_')")
        sender = _sender(payload)
        if event == "ping":
            return Envelope(event, None, payload, sender, title=None,
                            summary=f"Ping from hook {one_line(payload.get('hook_id', ''), 40)}")
        title = title_for(event, action, payload)
        summary = None if title else one_line(f"GitHub {event}{'.' + action if action else ''} in {_repo(payload)}")
        return Envelope(event, action, payload, sender, title=title, summary=summary)


def _sender(payload: Mapping[str, Any]) -> Sender | None:
    sender = payload.get("sender")
    if not isinstance(sender, dict):
        return None
    sid = sender.get("id")
    if isinstance(sid, bool) or not isinstance(sid, int) or sid <= 0:
        return None  # GitHub user ids are positive integers; anything else is nobody we know
    login = sender.get("login") if isinstance(sender.get("login"), str) else None
    kind = sender.get("type")
    # Only a "User" is a person; "Bot", "Organization", "Mannequin" are not (a missing type is
    # treated as a user, as in older payloads).
    is_bot = kind is not None and kind != "User"
    return Sender("github", "", str(sid), login, is_bot=is_bot)


def _repo(payload: Mapping[str, Any]) -> str:
    repo = payload.get("repository")
    if isinstance(repo, dict) and isinstance(repo.get("full_name"), str):
        return one_line(repo["full_name"], 100)
    return "an unknown repository"


def _get(payload: Mapping[str, Any], *path: str) -> Any:
    value: Any = payload
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def title_for(event: str, action: str | None, p: Mapping[str, Any]) -> str | None:
    """One-line titles for the events users act on; ``None`` for feed-only events.

    Also used by Gitea and Forgejo, whose payloads follow GitHub's shapes. A work event whose
    main object is missing (the header names an event the body is not) gets no title.
    """
    main = {"issues": "issue", "issue_comment": "comment", "pull_request": "pull_request",
            "pull_request_review": "review", "workflow_run": "workflow_run", "check_run": "check_run",
            "release": "release", "discussion": "discussion"}.get(event)
    if main is not None and not isinstance(p.get(main), dict):
        return None
    if event == "push" and not isinstance(p.get("ref"), str):
        return None
    repo = _repo(p)
    act = action or "updated"
    if event == "issues":
        return one_line(f"Issue #{_get(p, 'issue', 'number')} {act} in {repo}: {_get(p, 'issue', 'title') or ''}")
    if event == "issue_comment":
        kind = "PR" if isinstance(_get(p, "issue", "pull_request"), dict) else "issue"
        who = _get(p, "comment", "user", "login") or _get(p, "sender", "login") or "someone"
        return one_line(
            f"Comment {act} on {kind} #{_get(p, 'issue', 'number')} in {repo} by {who}: "
            f"{_get(p, 'issue', 'title') or ''}"
        )
    if event == "pull_request":
        number = p.get("number") or _get(p, "pull_request", "number")
        return one_line(f"PR #{number} {act} in {repo}: {_get(p, 'pull_request', 'title') or ''}")
    if event == "pull_request_review":
        state = _get(p, "review", "state") or act
        return one_line(
            f"Review ({state}) on PR #{_get(p, 'pull_request', 'number')} in {repo}: "
            f"{_get(p, 'pull_request', 'title') or ''}"
        )
    if event == "push":
        ref = str(p.get("ref") or "")
        name = ref.split("/", 2)[2] if ref.count("/") >= 2 else ref
        commits = p.get("commits") if isinstance(p.get("commits"), list) else []
        noun = "commit" if len(commits) == 1 else "commits"
        return one_line(f"Push to {name} in {repo}: {len(commits)} {noun}")
    if event == "workflow_run":
        run = p.get("workflow_run") if isinstance(p.get("workflow_run"), dict) else {}
        outcome = run.get("conclusion") or run.get("status") or ""
        return one_line(f"Workflow \"{run.get('name') or ''}\" {act} ({outcome}) in {repo}")
    if event == "check_run":
        run = p.get("check_run") if isinstance(p.get("check_run"), dict) else {}
        outcome = run.get("conclusion") or run.get("status") or ""
        return one_line(f"Check \"{run.get('name') or ''}\" {act} ({outcome}) in {repo}")
    if event == "release":
        rel = p.get("release") if isinstance(p.get("release"), dict) else {}
        return one_line(f"Release {rel.get('tag_name') or rel.get('name') or ''} {act} in {repo}")
    if event == "discussion":
        return one_line(
            f"Discussion #{_get(p, 'discussion', 'number')} {act} in {repo}: {_get(p, 'discussion', 'title') or ''}"
        )
    return None


ADAPTER = GitHubSource()
