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
import re
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument, MalformedPayload, MalformedRequest
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import (
    TITLE_MAX_CHARS,
    is_form,
    join_title,
    label,
    load_form,
    load_json_object,
    number,
    one_line,
)
from switchboard.text import ascii_digits
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
        if not ascii_digits(external_id):
            raise InvalidArgument("a GitHub external id is the numeric user id (sender.id), not the login")
        if workspace:
            raise InvalidArgument("GitHub identities have no workspace")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify ``X-Hub-Signature-256`` over the raw bytes (GitHub has no timestamp).

        A source with ``options.allow_legacy_sha1`` also accepts a request that carries only the
        legacy ``X-Hub-Signature`` (SHA-1); SHA-256 wins when both are sent.
        """
        if options.allow_legacy_sha1 and not headers.get("x-hub-signature-256") and headers.get("x-hub-signature"):
            hub_signature.verify_sha1(body, headers.get("x-hub-signature"), secrets)
            return
        hub_signature.verify(body, headers.get("x-hub-signature-256"), secrets)

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """SHA-256 of (hook id, delivery guid): fixed length, no collisions between the two parts.

        ``parse`` has already required ``X-GitHub-Delivery``.
        """
        delivery = headers.get("x-github-delivery", "").strip()
        if not delivery:
            return None
        hook = headers.get("x-github-hook-id", "").strip()
        # json.dumps([hook, delivery]) spelled out (its default encoder quotes strings with this
        # function): the same bytes, so keys stored by earlier versions still match.
        pair = "[" + encode_basestring_ascii(hook) + ", " + encode_basestring_ascii(delivery) + "]"
        return "github:" + hashlib.sha256(pair.encode("utf-8")).hexdigest()

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified delivery into an :class:`Envelope` with its title.

        Raises:
            MalformedRequest: ``X-GitHub-Event`` is not an event name, or ``X-GitHub-Delivery`` is
                missing (GitHub always sends both).
            MalformedPayload: the body or its ``payload`` field is not a strict JSON object, the
                form has other fields, or ``action`` is not a string.
        """
        event, action, payload = self._read(body, headers)
        sender = _sender(payload)
        if event == "ping":
            return Envelope(event, action, payload, sender, title=None,
                            summary=f"Ping from hook {one_line(payload.get('hook_id', ''), 40)}")
        title = title_for(event, action, payload)
        summary = None if title else one_line(f"GitHub {event}{'.' + action if action else ''} in {_repo(payload)}")
        return Envelope(event, action, payload, sender, title=title, summary=summary)

    def admit(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """:meth:`parse` without the title, summary and sender (the receiver's check; see
        :meth:`~switchboard.sources.base.BaseSource.admit`). Same errors as :meth:`parse`."""
        return Envelope(*self._read(body, headers))

    def _read(self, body: bytes, headers: Mapping[str, str]) -> tuple[str, str | None, dict[str, Any]]:
        """The event, the action (one line; ``None`` when absent, empty, or a ping's) and the
        payload; raises as :meth:`parse`."""
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
        raw_action = payload.get("action")
        if raw_action is not None and not isinstance(raw_action, str):
            raise MalformedPayload("'action' must be a string")
        # ``action`` is free text where the sender chooses it (``repository_dispatch``'s
        # event_type, up to 100 characters: ``deploy-staging``); GitHub promises a string, no
        # more, so nothing else is refused (issue 12 #5). It is kept on one line for kinds.
        action = one_line(raw_action, 100) or None if raw_action is not None and event != "ping" else None
        return event, action, payload


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


def _who(p: Mapping[str, Any], *path: str) -> str:
    return label(_get(p, *path, "user", "login")) or label(_get(p, "sender", "login")) or "someone"


def _ref_name(ref: str) -> tuple[str, str]:
    """``(kind, name)`` of a Git ref: ``("tag", "v1.2")``, ``("branch", "feature/x")``, or
    ``("ref", ref)`` for anything else. Names keep their slashes and any Unicode."""
    for prefix, kind in (("refs/tags/", "tag"), ("refs/heads/", "branch")):
        if ref.startswith(prefix) and len(ref) > len(prefix):
            return kind, ref[len(prefix):]
    return "ref", ref


def push_title(ref: object, repo: str, commits: int, *, deleted: bool = False, created: bool = False) -> str:
    """The title of a push (GitHub, Gitea, Forgejo, GitLab): a tag push says so, a deleted
    branch or tag says so, and an unknown ref is never shown as an empty name (issue 12 #6)."""
    kind, name = _ref_name(ref if isinstance(ref, str) else "")
    shown = label(name, 100)
    if shown is None:
        return one_line(f"Push in {repo}: {commits} commit{'' if commits == 1 else 's'}")
    if deleted:
        return one_line(f"{'Tag' if kind == 'tag' else 'Branch'} {shown} deleted in {repo}")
    if kind == "tag":
        return one_line(f"Tag {shown} pushed in {repo}")
    if created and commits == 0:
        return one_line(f"Branch {shown} created in {repo}")
    return one_line(f"Push to {shown} in {repo}: {commits} commit{'' if commits == 1 else 's'}")


def _outcome(run: Mapping[str, Any]) -> str:
    value = label(run.get("conclusion"), 40) or label(run.get("status"), 40)
    return f" ({value})" if value else ""


def title_for(event: str, action: str | None, p: Mapping[str, Any]) -> str | None:
    """One-line titles for the events users act on; ``None`` for feed-only events.

    Also used by Gitea and Forgejo, whose payloads follow GitHub's shapes. A work event whose
    main object is missing (the header names an event the body is not) gets no title. Empty,
    null and missing fields fall back to another field or are left out: never ``""``,
    ``None`` or a dangling colon (issue 12 #6). Whether a titled event becomes a todo is the
    source's ``todo_events`` choice (:mod:`switchboard.sources.routing`).
    """
    main = {"issues": "issue", "issue_comment": "comment", "pull_request": "pull_request",
            "pull_request_review": "review", "workflow_run": "workflow_run", "check_run": "check_run",
            "release": "release", "discussion": "discussion", "pull_request_review_comment": "comment",
            "discussion_comment": "comment", "commit_comment": "comment"}.get(event)
    if main is not None and not isinstance(p.get(main), dict):
        return None
    if event == "push" and not isinstance(p.get("ref"), str):
        return None
    repo = _repo(p)
    act = label(action, 60) or "updated"
    if event == "issues":
        return join_title(f"Issue{number(_get(p, 'issue', 'number'))} {act} in {repo}", _get(p, "issue", "title"))
    if event == "issue_comment":
        kind = "PR" if isinstance(_get(p, "issue", "pull_request"), dict) else "issue"
        return join_title(f"Comment {act} on {kind}{number(_get(p, 'issue', 'number'))} in {repo} by "
                          f"{_who(p, 'comment')}", _get(p, "issue", "title"))
    if event == "pull_request":
        num = number(p.get("number")) or number(_get(p, "pull_request", "number"))
        return join_title(f"PR{num} {act} in {repo}", _get(p, "pull_request", "title"))
    if event == "pull_request_review":
        state = label(_get(p, "review", "state"), 40) or act
        return join_title(f"Review ({state}) on PR{number(_get(p, 'pull_request', 'number'))} in {repo}",
                          _get(p, "pull_request", "title"))
    if event == "pull_request_review_comment":
        return join_title(f"Review comment {act} on PR{number(_get(p, 'pull_request', 'number'))} in {repo} by "
                          f"{_who(p, 'comment')}", _get(p, "pull_request", "title"))
    if event == "discussion_comment":
        return join_title(f"Comment {act} on discussion{number(_get(p, 'discussion', 'number'))} in {repo} by "
                          f"{_who(p, 'comment')}", _get(p, "discussion", "title"))
    if event == "commit_comment":
        sha = label(_get(p, "comment", "commit_id"), 40)
        on = f"commit {sha[:7]}" if sha else "a commit"
        return join_title(f"Comment on {on} in {repo} by {_who(p, 'comment')}", _get(p, "comment", "body"))
    if event == "push":
        commits = p.get("commits") if isinstance(p.get("commits"), list) else []
        return push_title(p.get("ref"), repo, len(commits), deleted=p.get("deleted") is True,
                          created=p.get("created") is True)
    if event == "workflow_run":
        run = p["workflow_run"]
        name = (label(run.get("name")) or label(run.get("display_title")) or label(_get(p, "workflow", "name"))
                or label(run.get("path")))
        head = f'Workflow "{name}"' if name else "A workflow run"
        return one_line(f"{head} {act}{_outcome(run)} in {repo}")
    if event == "check_run":
        run = p["check_run"]
        name = label(run.get("name")) or label(_get(run, "app", "name"))
        head = f'Check "{name}"' if name else "A check run"
        return one_line(f"{head} {act}{_outcome(run)} in {repo}")
    if event == "release":
        rel = p["release"]
        tag = label(rel.get("tag_name")) or label(rel.get("name"))
        return one_line(f"Release{' ' + tag if tag else ''} {act} in {repo}")
    if event == "discussion":
        return join_title(f"Discussion{number(_get(p, 'discussion', 'number'))} {act} in {repo}",
                          _get(p, "discussion", "title"))
    return None


ADAPTER = GitHubSource()
