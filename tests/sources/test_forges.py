"""Gitea, Forgejo, GitLab and Standard Webhooks adapters."""

from __future__ import annotations

import json

import pytest

from switchboard.errors import InvalidArgument
from switchboard.sources import SOURCE_SENDER, gitea, gitlab, standard_webhooks

H = {"content-type": "application/json"}


def test_gitea_issue_and_review() -> None:
    p = {"action": "opened", "issue": {"number": 3, "title": "Fix"}, "sender": {"id": 7, "login": "g"},
         "repository": {"full_name": "acme/api", "html_url": "https://Codeberg.org/acme/api"}}
    body = json.dumps(p).encode()
    env = gitea.FORGEJO.parse(body, {**H, "x-forgejo-event": "issues"})
    assert env.title == "Issue #3 opened in acme/api: Fix"
    assert env.sender is not None and (env.sender.provider, env.sender.workspace, env.sender.external_id) == \
        ("forgejo", "codeberg.org", "7")
    review = {**p, "pull_request": {"number": 4, "title": "PR"}}
    env = gitea.GITEA.parse(json.dumps(review).encode(), {**H, "x-gitea-event": "pull_request_approved"})
    assert env.title == "Review (approved) on PR #4 in acme/api: PR"
    assert gitea.GITEA.dedup_key({"x-gitea-delivery": "uuid-1"}, b"") == "uuid-1"


def test_gitlab_events() -> None:
    base = {"user": {"id": 4, "username": "gl"},
            "project": {"path_with_namespace": "acme/api", "web_url": "https://gitlab.com/acme/api"}}
    mr = {**base, "object_kind": "merge_request", "object_attributes": {"iid": 9, "title": "Retry", "action": "open"}}
    env = gitlab.ADAPTER.parse(json.dumps(mr).encode(), H)
    assert env.title == "MR !9 open in acme/api: Retry"
    assert (env.sender.workspace, env.sender.external_id) == ("gitlab.com", "4")  # type: ignore[union-attr]
    note = {**base, "object_kind": "note", "object_attributes": {"note": "LGTM", "noteable_type": "MergeRequest"},
            "merge_request": {"iid": 9}}
    assert gitlab.ADAPTER.parse(json.dumps(note).encode(), H).title == \
        "Comment on MergeRequest !9 in acme/api by gl: LGTM"
    push = {"object_kind": "push", "user_id": 4, "user_username": "gl", "ref": "refs/heads/main",
            "total_commits_count": 1, "project": base["project"]}
    env = gitlab.ADAPTER.parse(json.dumps(push).encode(), H)
    assert env.title == "Push to main in acme/api: 1 commit" and env.sender.external_id == "4"  # type: ignore[union-attr]
    bot = {**mr, "user": {"id": 5, "username": "project_12_bot_abc"}}
    assert gitlab.ADAPTER.parse(json.dumps(bot).encode(), H).sender.is_bot  # type: ignore[union-attr]
    # The event UUID is the event's identity (issue 12 #8); Idempotency-Key is per hook.
    assert gitlab.ADAPTER.dedup_key({"idempotency-key": "k", "x-gitlab-event-uuid": "u"}, b"") == "event:u"
    assert gitlab.ADAPTER.dedup_key({"idempotency-key": "k"}, b"") == "k"
    assert gitlab.ADAPTER.dedup_key({"x-gitlab-event-uuid": "u"}, b"") == "event:u"


@pytest.mark.parametrize("secret", ["", " padded", "whsec_short", "v1,whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
def test_gitlab_secret_validation(secret: str) -> None:
    with pytest.raises(InvalidArgument):
        gitlab.ADAPTER.validate_secret(secret)
    gitlab.ADAPTER.validate_secret("plain-token")
    gitlab.ADAPTER.validate_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")


def test_standard_webhooks_sender_is_the_source() -> None:
    env = standard_webhooks.ADAPTER.parse(b'{"type":"invoice.paid","data":{}}', H)
    assert env.title == "Webhook invoice.paid" and env.sender.external_id == SOURCE_SENDER  # type: ignore[union-attr]
    assert standard_webhooks.ADAPTER.dedup_key({"svix-id": "msg_1"}, b"") == "msg_1"
    assert standard_webhooks.ADAPTER.new_secret().startswith("whsec_")
    standard_webhooks.ADAPTER.validate_secret(standard_webhooks.ADAPTER.new_secret())


@pytest.mark.parametrize("provider,ws,uid", [("gitea", "", "7"), ("gitea", "codeberg.org", "octo"),
                                             ("gitlab", "", "4"), ("standard_webhooks", "", "alice")])
def test_identity_rules(provider: str, ws: str, uid: str) -> None:
    from switchboard.sources import adapter_for

    with pytest.raises(InvalidArgument):
        adapter_for(provider).validate_identity(ws, uid)


def test_forgejo_event_headers_that_disagree_are_refused() -> None:
    from switchboard.errors import MalformedRequest

    body = json.dumps({"action": "opened", "issue": {"number": 1, "title": "t"}}).encode()
    agree = {"x-forgejo-event": "issues", "x-gitea-event": "issues"}
    assert gitea.FORGEJO.parse(body, agree).event == "issues"
    with pytest.raises(MalformedRequest):
        gitea.FORGEJO.parse(body, {"x-forgejo-event": "issues", "x-gitea-event": "push"})
