"""GitLab webhooks.

- Verification, either or both (whichever headers GitLab sends, against the matching kind
  of configured secret):
  the secret token in ``X-Gitlab-Token`` compared in constant time
  (:mod:`switchboard.verifiers.shared_token`), and the signing token: Standard Webhooks
  ``webhook-id`` / ``webhook-timestamp`` / ``webhook-signature`` (``v1``, HMAC-SHA256 over
  ``id.timestamp.body``; configure it as ``whsec_<base64>``).
- Dedup key: ``X-Gitlab-Event-UUID``, the event's own identity: two hooks pointed at one
  source send one event with one event UUID (and a per-hook ``Idempotency-Key``), so they make
  one todo (issue 12 #8). ``Idempotency-Key`` (kept across GitLab's retries) when there is no
  event UUID. The body digest (:meth:`BaseSource.body_digest`) also catches a replay with
  fresh headers: the secret token signs nothing.
- Sender: ``user.id`` (``user_id`` on push events) in the workspace of the instance host
  (``project.web_url``): ``identity link --provider gitlab --workspace gitlab.com``.

Sources: https://docs.gitlab.com/user/project/integrations/webhooks/ ,
https://docs.gitlab.com/user/project/integrations/webhook_events/ and the signing-token
change https://gitlab.com/gitlab-org/gitlab/-/merge_requests/230944
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
from switchboard.sources.base import NO_OPTIONS, BaseSource, Envelope, Sender, SourceOptions
from switchboard.sources.bodies import (
    get,
    host_of,
    join_title,
    label,
    load_json_object,
    number,
    one_line,
    text,
)
from switchboard.sources.github import push_title
from switchboard.text import ascii_digits
from switchboard.verifiers import SignatureMismatch, SignatureMissing, shared_token, standard_webhooks


class GitLabSource(BaseSource):
    """The GitLab adapter (see module docstring)."""

    provider = "gitlab"
    secret_help = "a GitLab secret token"

    def validate_secret(self, secret: str) -> None:
        """A secret token (free text) or a signing token (``whsec_`` + base64, ≥ 24 bytes).

        Raises:
            InvalidArgument: with the reason; the value is never echoed.
        """
        if secret.startswith(standard_webhooks.SECRET_PREFIX):
            try:
                key = standard_webhooks.parse_key(secret)
            except ValueError as exc:
                raise InvalidArgument(f"GitLab signing token: {exc}") from None
            if key.kind != "hmac":
                raise InvalidArgument("a GitLab signing token is an HMAC secret (whsec_)")
            return
        if standard_webhooks.SECRET_PREFIX in secret:
            raise InvalidArgument("a GitLab signing token starts with 'whsec_' (paste it without a prefix)")
        self.validate_free_text_secret(secret, max_chars=255)

    def validate_identity(self, workspace: str, external_id: str) -> None:
        """The numeric ``user.id``; the workspace is the instance host.

        Raises:
            InvalidArgument: a non-numeric id or no workspace.
        """
        if not ascii_digits(external_id):
            raise InvalidArgument("a GitLab external id is the numeric user id (user.id), not the username")
        if not workspace:
            raise InvalidArgument("GitLab identities need --workspace: the instance host, e.g. gitlab.com")

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str], clock: Clock,
               options: SourceOptions = NO_OPTIONS) -> None:
        """Verify the signing-token signature and/or the secret token, whichever are sent.

        Raises:
            SignatureMissing: neither is present.
            SignatureMismatch: one present fails, or none could be checked.
            SignatureMalformed, TimestampOutOfWindow: from the Standard Webhooks scheme.
        """
        signing = [s for s in secrets if s.startswith(standard_webhooks.SECRET_PREFIX)]
        tokens = [s for s in secrets if not s.startswith(standard_webhooks.SECRET_PREFIX)]
        has_signature = bool(headers.get("webhook-signature"))
        token = headers.get("x-gitlab-token")
        if not has_signature and not token:
            raise SignatureMissing()
        if has_signature:
            if not signing:
                raise SignatureMismatch()
            standard_webhooks.verify(body, {k: v for k, v in headers.items() if not k.startswith("svix-")},
                                     signing, clock)
        if token:
            if tokens:
                shared_token.verify(token, tokens)
            elif not has_signature:
                raise SignatureMismatch()

    def dedup_key(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """``event:<X-Gitlab-Event-UUID>``, else ``Idempotency-Key``, else ``None``."""
        event = headers.get("x-gitlab-event-uuid", "").strip()
        if event:
            return f"event:{event[:200]}"
        return headers.get("idempotency-key", "").strip()[:200] or None

    def parse(self, body: bytes, headers: Mapping[str, str]) -> Envelope:
        """Parse a verified JSON delivery.

        Raises:
            MalformedPayload: the body is not a JSON object.
        """
        payload = load_json_object(body)
        kind = text(payload.get("object_kind")) or text(payload.get("event_type")) or "unknown"
        event = one_line(kind, 60)
        action = text(get(payload, "object_attributes", "action"), 60)
        title = _title(event, action, payload)
        project = one_line(get(payload, "project", "path_with_namespace") or "an unknown project", 100)
        summary = None if title else one_line(f"GitLab {event}{'.' + action if action else ''} in {project}")
        return Envelope(event, action, payload, _sender(payload), title=title, summary=summary)


def _sender(payload: Mapping[str, Any]) -> Sender | None:
    uid = text(get(payload, "user", "id")) or text(payload.get("user_id"))
    if uid is None:
        return None
    host = host_of(get(payload, "project", "web_url")) or host_of(get(payload, "repository", "homepage"))
    login = text(get(payload, "user", "username")) or text(payload.get("user_username"))
    # GitLab marks bot users (project/group access tokens, service accounts) only by username.
    is_bot = bool(login and login.startswith(("project_", "group_")) and "_bot" in login)
    return Sender("gitlab", host, uid, login, is_bot=is_bot)


_ZERO_SHA = "0" * 40


def _title(event: str, action: str | None, p: Mapping[str, Any]) -> str | None:
    """Titles for issues, merge requests, notes and pushes (tag pushes titled, routed by
    ``todo_events``); empty, null and missing fields are left out (issue 12 #6)."""
    project = one_line(get(p, "project", "path_with_namespace") or "an unknown project", 100)
    act = label(action, 60) or "updated"
    attrs = p.get("object_attributes") if isinstance(p.get("object_attributes"), dict) else {}
    if event in ("issue", "work_item"):
        return join_title(f"Issue{number(attrs.get('iid'))} {act} in {project}", attrs.get("title"))
    if event == "merge_request":
        return join_title(f"MR{number(attrs.get('iid'), '!')} {act} in {project}", attrs.get("title"))
    if event == "note":
        on = label(attrs.get("noteable_type"), 40) or "item"
        who = label(get(p, "user", "username")) or "someone"
        if on == "MergeRequest":
            ref = number(get(p, "merge_request", "iid"), "!")
        elif on == "Commit":
            sha = label(get(p, "commit", "id"), 40)
            ref = f" {sha[:8]}" if sha else ""
        else:
            ref = number(get(p, "issue", "iid"))
        return join_title(f"Comment on {on}{ref} in {project} by {who}", attrs.get("note"))
    if event in ("push", "tag_push"):
        count = p.get("total_commits_count")
        count = count if isinstance(count, int) and not isinstance(count, bool) else 0
        return push_title(p.get("ref"), project, count, deleted=p.get("after") == _ZERO_SHA,
                          created=p.get("before") == _ZERO_SHA)
    return None


ADAPTER = GitLabSource()
