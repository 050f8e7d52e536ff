"""Every provider through the real HTTP stack: accepted work, handshakes, acks, refusals."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import func, select

from switchboard.models import Delivery, Todo
from switchboard.models.base import new_ordered_id
from switchboard.sources import PROVIDERS
from tests.signers import SECRETS, payload, request, sign
from tests.web.multi import MultiApp


def _todo(app: MultiApp, delivery_id: str) -> Todo:
    d = app.processed(delivery_id)
    assert d.status == "processed", (d.status, d.quarantine_reason, d.error_code)
    with app.hub.db.read() as s:
        todo = s.get(Todo, d.todo_id)
        assert todo is not None
        return todo


def _count(app: MultiApp, model: type) -> int:
    with app.hub.db.read() as s:
        return int(s.execute(select(func.count()).select_from(model)).scalar_one())


@pytest.mark.parametrize("provider", PROVIDERS)
def test_signed_message_from_linked_human_becomes_a_todo(multi: MultiApp, provider: str) -> None:
    body, headers = request(provider)
    resp = multi.post(provider, body, headers)
    assert resp.status_code in (200, 202), resp.text
    if provider in ("discord", "teams"):
        assert resp.status_code == 200  # the ack carries the reply the provider shows
        delivery_id = re.search(r"dlv_[a-z2-7]+", resp.text).group(0)  # type: ignore[union-attr]
    else:
        assert resp.status_code == 202
        delivery_id = resp.json()["delivery_id"]
    assert re.fullmatch(r"dlv_[a-z2-7]{26}", delivery_id)  # new_ordered_id: led by its time (issue 11)
    assert delivery_id[:14] == new_ordered_id("dlv", multi.delivery(delivery_id).received_at)[:14]  # its ms
    todo = _todo(multi, delivery_id)
    assert "acme/api#12" in todo.title or "please review" in todo.title or provider == "standard_webhooks"
    assert todo.kind.startswith(provider + ".")
    assert "\n" not in todo.title


@pytest.mark.parametrize("provider", PROVIDERS)
def test_wrong_secret_is_401_and_stores_nothing(multi: MultiApp, provider: str) -> None:
    body = json.dumps(payload(provider)).encode()
    wrong = {"github": "nope", "gitea": "nope", "forgejo": "nope", "gitlab": "nope",
             "slack": "0" * 32, "teams": "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U=",
             "telegram": "nope", "standard_webhooks": "whsec_" + "A" * 32}
    if provider == "discord":
        headers = sign(provider, body)
        headers["X-Signature-Ed25519"] = "0" * 128
    elif provider == "mattermost":
        body = json.dumps({**payload(provider), "token": "a" * 26}).encode()
        headers = sign(provider, body)
    else:
        headers = sign(provider, body, wrong[provider])
    resp = multi.post(provider, body, headers)
    assert resp.status_code == 401, resp.text
    assert resp.json()["code"] == "signature_invalid"
    assert resp.json()["detail"] == "the delivery could not be verified"
    assert _count(multi, Delivery) == 0


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p not in ("mattermost", "telegram", "gitlab")])
def test_one_byte_changed_is_401(multi: MultiApp, provider: str) -> None:
    """(Shared-token schemes do not sign the body, so they are not in this list.)"""
    body, headers = request(provider)
    damaged = body.replace(b"review", b"reviex")
    assert multi.post(provider, damaged, headers).status_code == 401


@pytest.mark.parametrize("provider", PROVIDERS)
def test_missing_signature_headers_are_401(multi: MultiApp, provider: str) -> None:
    body, headers = request(provider)
    keep = {"content-type", "x-github-event", "x-gitea-event", "x-forgejo-event", "x-gitlab-event"}
    stripped = {k: v for k, v in headers.items() if k.lower() in keep}
    if provider == "mattermost":
        body = json.dumps({k: v for k, v in payload(provider).items() if k != "token"}).encode()
    assert multi.post(provider, body, stripped).status_code == 401


def test_slack_url_verification_answered_only_after_verifying(multi: MultiApp) -> None:
    body = json.dumps({"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
                       "type": "url_verification"}).encode()
    resp = multi.post("slack", body, sign("slack", body))
    assert resp.status_code == 200
    assert resp.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    assert multi.post("slack", body, sign("slack", body, "0" * 32)).status_code == 401
    assert _count(multi, Delivery) == 0


def test_discord_ping_gets_pong_only_when_signed(multi: MultiApp) -> None:
    body = b'{"type":1,"id":"1","application_id":"2"}'
    resp = multi.post("discord", body, sign("discord", body))
    assert resp.status_code == 200 and resp.json() == {"type": 1}
    assert resp.headers["content-type"].startswith("application/json")


def test_teams_ack_is_a_message_body(multi: MultiApp) -> None:
    body, headers = request("teams")
    resp = multi.post("teams", body, headers)
    assert resp.status_code == 200 and resp.json()["type"] == "message"
    assert resp.elapsed.total_seconds() < 5


def test_gitea_source_ignores_github_headers(multi: MultiApp) -> None:
    body, headers = request("gitea")
    # A valid GitHub-style signature with the Gitea secret does not make a Gitea source accept it.
    import hashlib
    import hmac

    only_github = {k: v for k, v in headers.items() if not k.lower().startswith("x-gitea")}
    only_github["X-Hub-Signature-256"] = "sha256=" + hmac.new(SECRETS["gitea"].encode(), body,
                                                              hashlib.sha256).hexdigest()
    assert multi.post("gitea", body, only_github).status_code == 401
    assert multi.post("gitea", body, headers).status_code == 202


def test_gitlab_signing_token_and_dedup_on_idempotency_key(multi: MultiApp) -> None:
    from switchboard import admin

    whsec = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
    with multi.hub.db.write() as s:
        src, _ = admin.add_source(s, "acme", "gitlab", whsec, queue="chat")
    multi.sources["gitlab_signed"] = src.id
    body = json.dumps(payload("gitlab")).encode()
    headers = sign("gitlab", body, whsec)
    first = multi.post("gitlab_signed", body, headers)
    assert first.status_code == 202
    # A retry carries the same Idempotency-Key (and a new event UUID): duplicate.
    retry = multi.post("gitlab_signed", body, {**headers, "X-Gitlab-Event-UUID": "other"})
    assert retry.status_code == 200 and retry.json()["duplicate"] is True
    # The plain token does not open a source configured with a signing token.
    plain = {k: v for k, v in headers.items() if not k.startswith("webhook-")}
    plain["X-Gitlab-Token"] = whsec
    assert multi.post("gitlab_signed", body, plain).status_code == 401


def test_telegram_update_id_dedups(multi: MultiApp) -> None:
    body, headers = request("telegram")
    first = multi.post("telegram", body, headers)
    again = multi.post("telegram", body, headers)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json() == {"delivery_id": first.json()["delivery_id"], "duplicate": True}


def test_mattermost_form_body_and_token_not_kept_in_payload(multi: MultiApp) -> None:
    body, headers = request("mattermost", form=True)
    resp = multi.post("mattermost", body, headers)
    assert resp.status_code == 202
    todo = _todo(multi, resp.json()["delivery_id"])
    assert "token" not in (todo.payload or {})
