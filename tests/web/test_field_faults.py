"""Issue 12 (field faults, second round) through the real HTTP stack: each reported input with
its right value, and at least one derived input per class, for every provider a class touches.

Class 9 (reverse proxy, MCP errors as problem details) is in ``test_behind_proxy.py``; the
title sweep over empty, null and missing fields is in ``tests/sources/test_titles.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from typing import Any

import httpx2
import pytest
from sqlalchemy import func, select

from switchboard import admin
from switchboard.models import Delivery, FeedEvent, Source, Todo
from tests.signers import SECRETS, SENDERS, now, payload, sign
from tests.web.multi import MultiApp

GENERIC = "the delivery could not be verified"
SLACK_USER = SENDERS["slack"][1]


def _count(app: MultiApp, model: type, *where: Any) -> int:
    with app.hub.db.read() as s:
        return int(s.execute(select(func.count()).select_from(model).where(*where)).scalar_one())


def _delivery_id(resp: httpx2.Response) -> str:
    found = re.search(r"dlv_[a-z2-7]+", resp.text)
    assert found, resp.text
    return found.group(0)


def _todo(app: MultiApp, delivery_id: str) -> Todo:
    d = app.processed(delivery_id)
    assert d.status == "processed" and d.todo_id, (d.status, d.quarantine_reason, d.error_code)
    with app.hub.db.read() as s:
        todo = s.get(Todo, d.todo_id)
        assert todo is not None
        return todo


def _slack(event: dict[str, Any], **outer: Any) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"team_id": "T024BE7LD", "api_app_id": "A0KRD7HC3", "type": "event_callback",
                       "event_id": "Ev" + uuid.uuid4().hex[:10].upper(), "event_time": now(), "event": event,
                       **outer}).encode()
    return body, sign("slack", body)


# 1. Every authentication failure is 401, whatever the header's shape ------------------------------

def _malformed(provider: str, body: bytes) -> dict[str, str]:
    headers = sign(provider, body)
    if provider == "discord":
        headers["X-Signature-Ed25519"] = "ab" * 63  # 126 hex digits (the reported input)
    elif provider == "github":
        headers["X-Hub-Signature-256"] = "sha256=not hex at all"  # the reported input
    elif provider == "teams":
        headers["Authorization"] = "HMAC " + base64.b64encode(b"\x01" * 64).decode()  # the reported input
    elif provider == "slack":
        headers["X-Slack-Signature"] = "v1=" + "0" * 64
    elif provider in ("gitea", "forgejo"):
        name = "Forgejo" if provider == "forgejo" else "Gitea"
        headers[f"X-{name}-Signature"] = "sha256=" + "0" * 64
    elif provider == "standard_webhooks":
        headers["webhook-signature"] = "v1,%%%"
        headers["webhook-id"] = "id with spaces"
    elif provider == "gitlab":
        headers["X-Gitlab-Token"] = "\u00e9" * 300
    elif provider == "telegram":
        headers["X-Telegram-Bot-Api-Secret-Token"] = "not/a token"
    return headers


@pytest.mark.parametrize("provider", ["discord", "github", "teams", "slack", "gitea", "forgejo",
                                      "standard_webhooks", "gitlab", "telegram"])
def test_a_malformed_credential_header_is_401_with_the_generic_message(multi: MultiApp, provider: str) -> None:
    body = json.dumps(payload(provider)).encode()
    headers = _malformed(provider, body)
    resp = httpx2.post(f"{multi.url}/hooks/{multi.sources[provider]}", content=body,
                       headers={k: v.encode() if not v.isascii() else v for k, v in headers.items()}, timeout=30)
    assert resp.status_code == 401, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["code"] == "signature_invalid" and resp.json()["detail"] == GENERIC
    assert _count(multi, Delivery) == 0


@pytest.mark.parametrize(("provider", "name", "value"), [
    ("discord", "X-Signature-Timestamp", "12.5"), ("slack", "X-Slack-Request-Timestamp", "-5"),
    ("standard_webhooks", "webhook-timestamp", "soon"), ("discord", "X-Signature-Ed25519", "zz" * 64),
    ("slack", "X-Slack-Signature", "v0=" + "0" * 63),
])
def test_a_malformed_timestamp_or_signature_is_401_on_every_timestamped_scheme(
        multi: MultiApp, provider: str, name: str, value: str) -> None:
    body = json.dumps(payload(provider)).encode()
    resp = multi.post(provider, body, {**sign(provider, body), name: value})
    assert resp.status_code == 401 and resp.json()["detail"] == GENERIC


def test_discord_ping_with_a_truncated_signature_is_401_never_pong(multi: MultiApp) -> None:
    body = b'{"type":1}'
    headers = sign("discord", body)
    headers["X-Signature-Ed25519"] = headers["X-Signature-Ed25519"][:126]
    resp = multi.post("discord", body, headers)
    assert resp.status_code == 401 and resp.json()["code"] == "signature_invalid"


# 2. Provider health checks, exactly, before verification -----------------------------------------

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize("body", [b"ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO", b"token=abc&ssl_check=1"])
def test_slack_ssl_check_is_200_empty_and_stores_nothing(multi: MultiApp, body: bytes) -> None:
    unsigned = multi.post("slack", body, FORM)
    assert unsigned.status_code == 200 and unsigned.content == b""
    signed = multi.post("slack", body, sign("slack", body, content_type=FORM["Content-Type"]))
    assert signed.status_code == 200 and signed.content == b""
    assert _count(multi, Delivery) == 0


@pytest.mark.parametrize("body", [b"ssl_check=1&token=abc&command=%2Fdeploy", b"ssl_check=1",
                                  b"ssl_check=0&token=abc", b"ssl_check=1&token=a&token=b"])
def test_anything_more_than_the_ssl_check_goes_through_verification(multi: MultiApp, body: bytes) -> None:
    resp = multi.post("slack", body, FORM)
    assert resp.status_code == 401 and resp.json()["code"] == "signature_invalid"
    assert _count(multi, Delivery) == 0


def test_an_ssl_check_to_another_provider_is_not_a_health_check(multi: MultiApp) -> None:
    for provider in ("github", "mattermost", "discord"):
        resp = multi.post(provider, b"ssl_check=1&token=abc", FORM)
        assert resp.status_code == 401, provider


# 3. One human message is one todo ---------------------------------------------------------------------

def test_slack_message_and_app_mention_of_one_message_make_one_todo(multi: MultiApp) -> None:
    text = "<@U0LAN0Z89> please review acme/api#12"
    common = {"user": SLACK_USER, "text": text, "ts": "1700000000.000200", "channel": "C0LAN2Q65",
              "event_ts": "1700000000.000200"}
    first = multi.post("slack", *_slack({"type": "message", "channel_type": "channel", **common}))
    assert first.status_code == 202
    second = multi.post("slack", *_slack({"type": "app_mention", **common}))
    assert second.status_code == 200
    assert second.json() == {"delivery_id": first.json()["delivery_id"], "duplicate": True}
    _todo(multi, first.json()["delivery_id"])
    assert _count(multi, Todo) == 1 and _count(multi, Delivery) == 1


def test_slack_mention_first_then_message_then_a_retry_are_one_todo(multi: MultiApp) -> None:
    common = {"user": SLACK_USER, "text": "<@U0LAN0Z89> ship it", "ts": "1700000001.000300", "channel": "C0LAN2Q65"}
    body, headers = _slack({"type": "app_mention", **common})
    first = multi.post("slack", body, headers)
    assert first.status_code == 202
    assert multi.post("slack", *_slack({"type": "message", **common})).json()["duplicate"] is True
    retry = multi.post("slack", body, {**sign("slack", body), "X-Slack-Retry-Num": "1"})
    assert retry.json() == {"delivery_id": first.json()["delivery_id"], "duplicate": True}
    # Another message (a thread reply: new ts) and the same ts in another channel are new work.
    reply = multi.post("slack", *_slack({"type": "message", **common, "ts": "1700000002.000100",
                                         "thread_ts": common["ts"]}))
    other = multi.post("slack", *_slack({"type": "message", **common, "channel": "C0OTHER99"}))
    assert reply.status_code == 202 and other.status_code == 202
    for resp in (first, reply, other):
        _todo(multi, resp.json()["delivery_id"])
    assert _count(multi, Todo) == 3


def test_mattermost_post_sent_by_two_outgoing_webhooks_is_one_todo(multi: MultiApp) -> None:
    p = payload("mattermost")
    body = json.dumps(p).encode()
    first = multi.post("mattermost", body, sign("mattermost", body))
    again = json.dumps({**p, "trigger_word": "review"}).encode()  # a second hook, another trigger word
    second = multi.post("mattermost", again, sign("mattermost", again))
    assert second.status_code == 200 and second.json()["delivery_id"] == first.json()["delivery_id"]


# 4. Attribution reads nested authors ----------------------------------------------------------------------

def test_slack_message_changed_is_attributed_to_the_nested_author(multi: MultiApp) -> None:
    edit = {"type": "message", "subtype": "message_changed", "channel": "C0LAN2Q65", "hidden": True,
            "ts": "1700000003.000100", "event_ts": "1700000003.000100",
            "message": {"type": "message", "user": SLACK_USER, "text": "fixed typo", "ts": "1700000000.000200",
                        "edited": {"user": SLACK_USER, "ts": "1700000003.000000"}},
            "previous_message": {"type": "message", "user": SLACK_USER, "text": "fxied typo"}}
    resp = multi.post("slack", *_slack(edit))
    assert resp.status_code == 202
    d = multi.processed(resp.json()["delivery_id"])
    assert d.status == "processed" and d.quarantine_reason is None and d.human_id is not None
    assert d.todo_id is None  # an edit is news for the feed, not new work


def test_slack_bot_edit_is_flagged_as_a_bot(multi: MultiApp) -> None:
    edit = {"type": "message", "subtype": "message_changed", "channel": "C0LAN2Q65", "ts": "1700000004.000100",
            "message": {"type": "message", "bot_id": "B0123ABC", "subtype": "bot_message", "text": "build green",
                        "ts": "1700000000.000900"}}
    d = multi.processed(multi.post("slack", *_slack(edit)).json()["delivery_id"])
    assert d.status == "quarantined" and d.quarantine_reason == "bot_sender"


@pytest.mark.parametrize("event", [
    {"type": "message", "subtype": "message_deleted", "channel": "C0LAN2Q65", "ts": "1700000005.000100",
     "deleted_ts": "1700000000.000200", "previous_message": {"type": "message", "user": SLACK_USER, "text": "x"}},
    {"type": "message", "subtype": "message_replied", "channel": "C0LAN2Q65", "ts": "1700000006.000100",
     "message": {"type": "message", "user": SLACK_USER, "text": "parent", "ts": "1700000000.000200",
                 "thread_ts": "1700000000.000200", "reply_count": 1}},
    {"type": "user_change", "user": {"id": SLACK_USER, "team_id": "T024BE7LD", "name": "alice", "is_bot": False}},
])
def test_other_nested_slack_authors_are_attributed(multi: MultiApp, event: dict[str, Any]) -> None:
    d = multi.processed(multi.post("slack", *_slack(event)).json()["delivery_id"])
    assert d.status == "processed" and d.human_id is not None, (d.status, d.quarantine_reason)


def test_slack_thread_broadcast_and_interaction_of_a_linked_human_are_work(multi: MultiApp) -> None:
    broadcast = {"type": "message", "subtype": "thread_broadcast", "user": SLACK_USER, "text": "also here",
                 "channel": "C0LAN2Q65", "ts": "1700000007.000100", "thread_ts": "1700000000.000200"}
    todo = _todo(multi, multi.post("slack", *_slack(broadcast)).json()["delivery_id"])
    assert todo.title == f"Slack message from {SLACK_USER} in C0LAN2Q65: also here"


def test_telegram_reaction_is_attributed_to_its_user(multi: MultiApp) -> None:
    uid = int(SENDERS["telegram"][1])
    body = json.dumps({"update_id": 991, "message_reaction": {
        "chat": {"id": uid, "type": "private"}, "message_id": 5, "date": now(),
        "user": {"id": uid, "is_bot": False, "first_name": "Ann"},
        "old_reaction": [], "new_reaction": [{"type": "emoji", "emoji": "\U0001f44d"}]}}).encode()
    d = multi.processed(multi.post("telegram", body, sign("telegram", body)).json()["delivery_id"])
    assert d.status == "processed" and d.human_id is not None and d.todo_id is None


def test_gitlab_push_names_its_pusher_from_the_top_level_fields(multi: MultiApp) -> None:
    push = {"object_kind": "push", "event_name": "push", "before": "a" * 40, "after": "b" * 40,
            "ref": "refs/heads/feature/ünï/x", "user_id": 4, "user_username": "gl", "total_commits_count": 2,
            "project": {"path_with_namespace": "acme/api", "web_url": "https://gitlab.com/acme/api"},
            "commits": [{}, {}]}
    body = json.dumps(push).encode()
    todo = _todo(multi, multi.post("gitlab", body, sign("gitlab", body, event="Push Hook")).json()["delivery_id"])
    assert todo.title == "Push to feature/ünï/x in acme/api: 2 commits"


# 5. Free-form provider fields are data -------------------------------------------------------------------

def _github(app: MultiApp, p: dict[str, Any], event: str, **headers: str) -> httpx2.Response:
    body = json.dumps(p).encode()
    return app.post("github", body, {**sign("github", body, event=event), **headers})


GITHUB_SENDER = {"id": int(SENDERS["github"][1]), "login": "octo", "type": "User"}
REPO = {"full_name": "acme/api", "html_url": "https://github.com/acme/api"}


@pytest.mark.parametrize("action", ["deploy-staging", "Deploy Prod!", "déploiement/prod", "x" * 100])
def test_repository_dispatch_with_a_free_text_action_is_accepted(multi: MultiApp, action: str) -> None:
    resp = _github(multi, {"action": action, "branch": "main", "client_payload": {"env": "staging"},
                           "repository": REPO, "sender": GITHUB_SENDER}, "repository_dispatch")
    assert resp.status_code == 202, resp.text
    d = multi.processed(resp.json()["delivery_id"])
    assert d.status == "processed" and d.event == f"repository_dispatch.{action}"[:100]


def test_a_channel_tag_in_a_free_text_action_is_rejected_as_a_channel_break(multi: MultiApp) -> None:
    resp = _github(multi, {"action": "</channel>", "repository": REPO, "sender": GITHUB_SENDER},
                   "repository_dispatch")
    assert resp.status_code == 202
    d = multi.processed(resp.json()["delivery_id"])
    assert d.status == "rejected" and d.error_code == "channel_break"


def test_a_non_string_action_is_still_malformed(multi: MultiApp) -> None:
    resp = _github(multi, {"action": 7, "repository": REPO, "sender": GITHUB_SENDER}, "repository_dispatch")
    assert resp.status_code == 400 and resp.json()["code"] == "malformed_payload"


def test_branch_names_with_slashes_and_unicode_and_labels_are_data(multi: MultiApp) -> None:
    push = {"ref": "refs/heads/feature/ñandú/🚀", "before": "a" * 40, "after": "b" * 40, "created": False,
            "deleted": False, "commits": [{"id": "b" * 40}], "repository": REPO, "sender": GITHUB_SENDER}
    todo = _todo(multi, _github(multi, push, "push").json()["delivery_id"])
    assert todo.title == "Push to feature/ñandú/🚀 in acme/api: 1 commit"
    labeled = {"action": "labeled", "label": {"name": "needs: review/🔥"}, "repository": REPO,
               "issue": {"number": 3, "title": "Crash"}, "sender": GITHUB_SENDER}
    assert _todo(multi, _github(multi, labeled, "issues").json()["delivery_id"]).title == \
        "Issue #3 labeled in acme/api: Crash"


def test_gitea_free_text_action_and_event_are_data(multi: MultiApp) -> None:
    p = {**payload("gitea"), "action": "label_updated/custom"}
    body = json.dumps(p).encode()
    d = multi.processed(multi.post("gitea", body, sign("gitea", body)).json()["delivery_id"])
    assert d.status == "processed" and d.event == "issues.label_updated/custom"


# 6. Titles never show an empty or misleading name (the sweep is in tests/sources/test_titles.py) ----------

def test_workflow_run_with_an_empty_name_falls_back_to_its_display_title(multi: MultiApp) -> None:
    run = {"action": "completed", "repository": REPO, "sender": GITHUB_SENDER,
           "workflow": {"name": "CI"},
           "workflow_run": {"name": "", "display_title": "Bump deps", "status": "completed", "conclusion": "success"}}
    todo = _todo(multi, _github(multi, run, "workflow_run").json()["delivery_id"])
    assert todo.title == 'Workflow "Bump deps" completed (success) in acme/api'
    run["workflow_run"] = {"name": None, "status": "completed", "conclusion": None}
    todo = _todo(multi, _github(multi, run, "workflow_run").json()["delivery_id"])
    assert todo.title == 'Workflow "CI" completed (completed) in acme/api'


def test_a_tag_push_says_a_tag_was_pushed(multi: MultiApp) -> None:
    push = {"ref": "refs/tags/v1.2", "before": "0" * 40, "after": "c" * 40, "created": True, "deleted": False,
            "commits": [], "repository": REPO, "sender": GITHUB_SENDER}
    assert _todo(multi, _github(multi, push, "push").json()["delivery_id"]).title == "Tag v1.2 pushed in acme/api"


def test_a_discord_command_without_a_target_has_no_dangling_colon(multi: MultiApp) -> None:
    p = payload("discord")
    p["data"] = {"name": "review"}
    body = json.dumps(p).encode()
    todo = _todo(multi, _delivery_id(multi.post("discord", body, sign("discord", body))))
    assert todo.title == "Discord /review from mason"
    p = payload("discord")
    p["data"] = {"name": "deploy", "options": [{"name": "prod", "type": 1, "options": [
        {"name": "service", "type": 3, "value": "api"}, {"name": "note", "type": 3, "value": ""}]}]}
    body = json.dumps(p).encode()
    assert _todo(multi, _delivery_id(multi.post("discord", body, sign("discord", body)))).title == \
        "Discord /deploy prod from mason: service=api"


def test_an_empty_slack_mention_is_titled_without_a_colon(multi: MultiApp) -> None:
    event = {"type": "app_mention", "user": SLACK_USER, "text": "", "ts": "1700000009.000100", "channel": "C0LAN2Q65"}
    todo = _todo(multi, multi.post("slack", *_slack(event)).json()["delivery_id"])
    assert todo.title == f"Slack mention from {SLACK_USER} in C0LAN2Q65"


# 7. A captured delivery cannot be replayed as new work ----------------------------------------------------

def test_github_body_replayed_with_a_fresh_delivery_header_is_a_duplicate(multi: MultiApp) -> None:
    body = json.dumps(payload("github")).encode()
    first = multi.post("github", body, sign("github", body))
    assert first.status_code == 202
    fresh = sign("github", body)  # a new X-GitHub-Delivery GUID, the same signature
    assert fresh["X-GitHub-Delivery"] != first.request.headers["X-GitHub-Delivery"]
    replay = multi.post("github", body, fresh)
    assert replay.status_code == 200
    assert replay.json() == {"delivery_id": first.json()["delivery_id"], "duplicate": True}
    # Another event name and another hook id over the same signed body: still the same delivery.
    other = multi.post("github", body, {**sign("github", body, event="pull_request"), "X-GitHub-Hook-ID": "99"})
    assert other.status_code == 200 and other.json()["delivery_id"] == first.json()["delivery_id"]
    _todo(multi, first.json()["delivery_id"])
    assert _count(multi, Todo) == 1 and _count(multi, Delivery) == 1


@pytest.mark.parametrize("provider", ["gitea", "forgejo", "teams", "gitlab", "telegram", "mattermost"])
def test_every_scheme_without_a_timestamp_dedups_a_replayed_body(multi: MultiApp, provider: str) -> None:
    body = json.dumps(payload(provider)).encode()
    first = multi.post(provider, body, sign(provider, body))
    assert first.status_code in (200, 202)
    replay = multi.post(provider, body, sign(provider, body))  # fresh delivery / event / hook headers
    assert replay.status_code == 200 and replay.json()["duplicate"] is True
    assert replay.json()["delivery_id"] == _delivery_id(first)
    assert _count(multi, Delivery) == 1


def test_timestamped_schemes_keep_identical_bodies_with_distinct_message_ids(multi: MultiApp) -> None:
    # Standard Webhooks signs id + timestamp: the same body under a new message id is a new
    # message (e.g. two identical notifications), not a replay, and is not deduplicated by digest.
    body = json.dumps(payload("standard_webhooks")).encode()
    first = multi.post("standard_webhooks", body, sign("standard_webhooks", body))
    second = multi.post("standard_webhooks", body, sign("standard_webhooks", body))
    assert first.status_code == 202 and second.status_code == 202
    assert first.json()["delivery_id"] != second.json()["delivery_id"]
    with multi.hub.db.read() as s:
        assert s.execute(select(Delivery.body_digest)).scalars().all() == [None, None]


def test_the_digest_is_per_source(multi: MultiApp) -> None:
    body = json.dumps(payload("github")).encode()
    assert multi.post("github", body, sign("github", body)).status_code == 202
    with multi.hub.db.write() as s:
        other, _ = admin.add_source(s, "acme", "github", SECRETS["github"], queue="other")
    resp = httpx2.post(f"{multi.url}/hooks/{other.id}", content=body, headers=sign("github", body), timeout=30)
    assert resp.status_code == 202
    with multi.hub.db.read() as s:
        digests = s.execute(select(Delivery.body_digest)).scalars().all()
    assert digests == [hashlib.sha256(body).hexdigest()] * 2


# 8. One event sent by two hooks is one todo -----------------------------------------------------------------

def test_gitlab_event_from_two_hooks_is_one_todo(multi: MultiApp) -> None:
    body = json.dumps(payload("gitlab")).encode()
    event_uuid = str(uuid.uuid4())
    hook_a = {**sign("gitlab", body), "X-Gitlab-Event-UUID": event_uuid, "Idempotency-Key": str(uuid.uuid4())}
    hook_b = {**sign("gitlab", body), "X-Gitlab-Event-UUID": event_uuid, "Idempotency-Key": str(uuid.uuid4())}
    first = multi.post("gitlab", body, hook_a)
    second = multi.post("gitlab", body, hook_b)
    assert first.status_code == 202
    assert second.status_code == 200 and second.json()["delivery_id"] == first.json()["delivery_id"]
    _todo(multi, first.json()["delivery_id"])
    assert _count(multi, Todo) == 1


def test_gitlab_signing_token_hooks_for_one_event_are_one_todo(multi: MultiApp) -> None:
    from tests.signers import standard_webhooks_v1

    whsec = "whsec_" + base64.b64encode(b"k" * 32).decode()
    with multi.hub.db.write() as s:
        src, _ = admin.add_source(s, "acme", "gitlab", whsec, queue="signed")
    event_uuid = str(uuid.uuid4())
    ids = []
    for n in range(2):
        # Each hook: its own idempotency key and message id, its own second; the same event.
        p = {**payload("gitlab"), "hook": n}  # bodies may differ per hook; the event UUID does not
        body = json.dumps(p).encode()
        msg_id, ts = str(uuid.uuid4()), now() + n
        headers = {"Content-Type": "application/json", "X-Gitlab-Event": "Issue Hook",
                   "X-Gitlab-Event-UUID": event_uuid, "Idempotency-Key": msg_id, "webhook-id": msg_id,
                   "webhook-timestamp": str(ts), "webhook-signature": standard_webhooks_v1(msg_id, ts, body, whsec)}
        resp = httpx2.post(f"{multi.url}/hooks/{src.id}", content=body, headers=headers, timeout=30)
        assert resp.status_code in (200, 202), resp.text
        ids.append(resp.json()["delivery_id"])
    assert ids[0] == ids[1]


def test_gitlab_retry_of_one_hook_is_a_duplicate(multi: MultiApp) -> None:
    body = json.dumps(payload("gitlab")).encode()
    headers = sign("gitlab", body)
    first = multi.post("gitlab", body, headers)
    retry = multi.post("gitlab", body, headers)
    assert retry.status_code == 200 and retry.json()["delivery_id"] == first.json()["delivery_id"]


# Per-source todo events --------------------------------------------------------------------------------------

def _review_comment() -> dict[str, Any]:
    return {"action": "created", "repository": REPO, "sender": GITHUB_SENDER,
            "pull_request": {"number": 7, "title": "Speed up claims"},
            "comment": {"body": "nit: rename", "user": {"login": "octo"}, "path": "a.py"}}


def test_review_comments_are_feed_events_by_default(multi: MultiApp) -> None:
    resp = _github(multi, _review_comment(), "pull_request_review_comment")
    d = multi.processed(resp.json()["delivery_id"])
    assert d.status == "processed" and d.todo_id is None
    with multi.hub.db.read() as s:
        event = s.execute(select(FeedEvent).where(FeedEvent.subject_id == d.id)).scalars().one()
    assert event.title == "Review comment created on PR #7 in acme/api by octo: Speed up claims"


def test_a_source_chooses_which_events_become_todos(multi: MultiApp) -> None:
    with multi.hub.db.write() as s:
        admin.set_todo_events(s, multi.sources["github"], "issues.opened, pull_request_review_comment")
    todo = _todo(multi, _github(multi, _review_comment(), "pull_request_review_comment").json()["delivery_id"])
    assert todo.title.startswith("Review comment created on PR #7") and todo.kind == \
        "github.pull_request_review_comment.created"
    _todo(multi, _github(multi, payload("github"), "issues").json()["delivery_id"])  # issues.opened
    closed = {**payload("github"), "action": "closed"}
    d = multi.processed(_github(multi, closed, "issues").json()["delivery_id"])
    assert d.status == "processed" and d.todo_id is None  # not chosen: a feed event only
    with multi.hub.db.write() as s:
        admin.set_todo_events(s, multi.sources["github"], "none")
        assert s.get(Source, multi.sources["github"]).todo_events == []  # type: ignore[union-attr]
    d = multi.processed(_github(multi, {**payload("github"), "n": 2}, "issues").json()["delivery_id"])
    assert d.todo_id is None


def test_slack_source_can_take_mentions_only(multi: MultiApp) -> None:
    with multi.hub.db.write() as s:
        admin.set_todo_events(s, multi.sources["slack"], "event_callback.app_mention")
    plain = {"type": "message", "user": SLACK_USER, "text": "lunch?", "ts": "1700000010.000100", "channel": "C1"}
    d = multi.processed(multi.post("slack", *_slack(plain)).json()["delivery_id"])
    assert d.todo_id is None
    mention = {**plain, "type": "app_mention", "ts": "1700000011.000100", "text": "<@U0LAN0Z89> help"}
    _todo(multi, multi.post("slack", *_slack(mention)).json()["delivery_id"])

