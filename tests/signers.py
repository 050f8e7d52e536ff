"""Sign requests the way each provider does, for tests (never used by the package).

Each ``*_request`` returns ``(body, headers)`` for a realistic payload; keys are fixed test
values (the Ed25519 pair is RFC 8032 section 7.1 TEST 1).

The signatures are computed here with ``hmac``, ``hashlib``, ``base64`` and ``cryptography``
straight from each provider's documentation, never with the product's own ``sign()`` helpers:
a bug shared by a signer and its verifier would otherwise pass every test (issue 17). The
functions are checked against the providers' published vectors in
``tests/verifiers/test_independent_signers.py``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any
from urllib.parse import urlencode

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ED25519_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
DISCORD_PUBLIC_KEY = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
SLACK_SECRET = "8f742231b10e8888abcd99ddd0ee85a5"
TEAMS_TOKEN = "vqF0En+Z0ucuRTM/01o2GuhMH3hKKk/N2bOmlM31zaA="
MATTERMOST_TOKEN = "xbdz6ajf3fd6bpxy8h4fq9yyhr"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

# Secrets a test source of each provider is configured with.
SECRETS = {
    "github": "It's a Secret to Everybody", "gitea": "gitea-secret", "forgejo": "forgejo-secret",
    "gitlab": "gitlab-token", "slack": SLACK_SECRET, "discord": DISCORD_PUBLIC_KEY, "teams": TEAMS_TOKEN,
    "mattermost": MATTERMOST_TOKEN, "telegram": "tg-secret_1", "standard_webhooks": WHSEC,
}
# The sender each sample payload names: (workspace, external_id), linkable with identity link.
SENDERS = {
    "github": ("", "21031067"), "gitea": ("gitea.example", "7"), "forgejo": ("codeberg.org", "8"),
    "gitlab": ("gitlab.com", "4"), "slack": ("T024BE7LD", "U2147483697"), "discord": ("", "53908232506183680"),
    "teams": ("", "6d5cdb1f-7e1a-4a08-8f3d-2c9c7c2a4e11"),
    "mattermost": ("rdc9bgriktyx9p4kowh3dmgqyc", "rrqfmbcgzjfijkpebc9un5jmwe"), "telegram": ("", "1111111"),
    "standard_webhooks": ("", "<source>"),
}


def hub_sha256(body: bytes, secret: str | bytes) -> str:
    """GitHub's ``X-Hub-Signature-256``: ``sha256=`` + hex HMAC-SHA256 of the raw body, key as UTF-8.

    Source: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    """
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def hub_sha1(body: bytes, secret: str | bytes) -> str:
    """GitHub's legacy ``X-Hub-Signature``: ``sha1=`` + hex HMAC-SHA1 of the raw body."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest()


def slack_v0(body: bytes, ts: int | str, secret: str) -> str:
    """Slack's ``X-Slack-Signature``: ``v0=`` + hex HMAC-SHA256 of ``v0:<ts>:<body>``, key as UTF-8.

    Source: https://api.slack.com/authentication/verifying-requests-from-slack
    """
    base = b"v0:" + str(ts).encode("ascii") + b":" + body
    return "v0=" + hmac.new(secret.encode("utf-8"), base, hashlib.sha256).hexdigest()


def standard_webhooks_v1(msg_id: str, ts: int | str, body: bytes, secret: str) -> str:
    """A Standard Webhooks ``v1,<base64>`` entry: HMAC-SHA256 of ``<id>.<ts>.<body>`` keyed with
    the base64-decoded part of ``whsec_<base64>``.

    Source: https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
    """
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = f"{msg_id}.{ts}.".encode("ascii") + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode("ascii")


def standard_webhooks_v1a(msg_id: str, ts: int | str, body: bytes, seed: bytes) -> str:
    """A Standard Webhooks ``v1a,<base64>`` entry: Ed25519 over ``<id>.<ts>.<body>``."""
    content = f"{msg_id}.{ts}.".encode("ascii") + body
    return "v1a," + base64.b64encode(Ed25519PrivateKey.from_private_bytes(seed).sign(content)).decode("ascii")


def teams_hmac(body: bytes, token: str) -> str:
    """Teams' ``Authorization: HMAC <base64 HMAC-SHA256 of the body>``, keyed with the
    base64-decoded security token.

    Source: https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/add-outgoing-webhook
    """
    digest = hmac.new(base64.b64decode(token), body, hashlib.sha256).digest()
    return "HMAC " + base64.b64encode(digest).decode("ascii")


def discord_ed25519(body: bytes, ts: int | str, seed: bytes = ED25519_SEED) -> str:
    """Discord's ``X-Signature-Ed25519``: hex Ed25519 over ``<timestamp><body>``."""
    return Ed25519PrivateKey.from_private_bytes(seed).sign(str(ts).encode("ascii") + body).hex()


def now() -> int:
    return int(time.time())


def payload(provider: str, text: str = "please review acme/api#12", **extra: Any) -> dict[str, Any]:
    """A realistic work-making payload from the linked sender of :data:`SENDERS`."""
    ws, uid = SENDERS[provider]
    if provider in ("github", "gitea", "forgejo"):
        host = ws or "github.com"
        p: dict[str, Any] = {"action": "opened", "issue": {"number": 12, "title": text},
                             "repository": {"full_name": "acme/api", "html_url": f"https://{host}/acme/api"},
                             "sender": {"id": int(uid), "login": "octo", "type": "User"}}
    elif provider == "gitlab":
        p = {"object_kind": "issue", "event_type": "issue", "user": {"id": int(uid), "username": "gl"},
             "project": {"path_with_namespace": "acme/api", "web_url": "https://gitlab.com/acme/api"},
             "object_attributes": {"iid": 12, "title": text, "action": "open"}}
    elif provider == "slack":
        p = {"token": "legacy", "team_id": ws, "api_app_id": "A0KRD7HC3", "type": "event_callback",
             "event_id": "Ev" + uuid.uuid4().hex[:10].upper(), "event_time": now(),
             "event": {"type": "app_mention", "user": uid, "text": f"<@U0LAN0Z89> {text}",
                       # ts is unique per channel: it identifies the message (issue 12 #3)
                       "ts": f"{now()}.{uuid.uuid4().int % 10**6:06d}",
                       "channel": "C0LAN2Q65"}}
    elif provider == "discord":
        p = {"id": str(uuid.uuid4().int)[:18], "application_id": "1", "type": 2, "token": "interaction-token",
             "guild_id": "290926798626357999",
             "member": {"user": {"id": uid, "username": "mason", "bot": False}},
             "data": {"name": "review", "options": [{"name": "target", "value": text}]}}
    elif provider == "teams":
        p = {"type": "message", "id": str(uuid.uuid4()), "text": f"<at>Switchboard</at> {text}",
             "from": {"id": "29:1", "name": "Megan", "aadObjectId": uid},
             "conversation": {"id": "19:abc"}, "channelData": {"tenant": {"id": "t1"}}}
    elif provider == "mattermost":
        p = {"token": MATTERMOST_TOKEN, "team_id": ws, "team_domain": "acme", "channel_id": "c" * 26,
             "channel_name": "town-square", "timestamp": 1, "user_id": uid, "user_name": "bob",
             "post_id": uuid.uuid4().hex[:26], "text": f"sb {text}", "trigger_word": "sb"}
    elif provider == "telegram":
        p = {"update_id": int(uuid.uuid4().int % 10**9),
             "message": {"message_id": 5, "from": {"id": int(uid), "is_bot": False, "first_name": "Ann"},
                         "chat": {"id": int(uid), "type": "private"}, "date": now(), "text": text}}
    else:
        p = {"type": "invoice.paid", "timestamp": "2026-11-30T00:00:00Z", "data": {"note": text}}
    p.update(extra)
    return p


def sign(provider: str, body: bytes, secret: str | None = None, *, ts: int | None = None,
         content_type: str = "application/json", event: str | None = None) -> dict[str, str]:
    """The headers ``provider`` sends with ``body``, signed with ``secret``."""
    secret = SECRETS[provider] if secret is None else secret
    ts = now() if ts is None else ts
    h = {"Content-Type": content_type}
    if provider == "github":
        h.update({"X-GitHub-Event": event or "issues", "X-GitHub-Delivery": str(uuid.uuid4()), "X-GitHub-Hook-ID": "1",
                  "X-Hub-Signature-256": hub_sha256(body, secret)})
    elif provider in ("gitea", "forgejo"):
        name = "Forgejo" if provider == "forgejo" else "Gitea"
        sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        h.update({f"X-{name}-Event": event or "issues", f"X-{name}-Delivery": str(uuid.uuid4()),
                  f"X-{name}-Signature": sig,
                  # Gitea also sends GitHub-style headers; a Gitea source must ignore them.
                  "X-GitHub-Event": event or "issues", "X-Hub-Signature-256": "sha256=" + "0" * 64})
    elif provider == "gitlab":
        h.update({"X-Gitlab-Event": event or "Issue Hook", "X-Gitlab-Event-UUID": str(uuid.uuid4()),
                  "Idempotency-Key": str(uuid.uuid4())})
        if secret.startswith("whsec_"):
            msg_id = h["Idempotency-Key"]
            h.update({"webhook-id": msg_id, "webhook-timestamp": str(ts),
                      "webhook-signature": standard_webhooks_v1(msg_id, ts, body, secret)})
        else:
            h["X-Gitlab-Token"] = secret
    elif provider == "slack":
        h.update({"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": slack_v0(body, ts, secret)})
    elif provider == "discord":
        assert secret == DISCORD_PUBLIC_KEY, "sign Discord requests with the RFC 8032 test key"
        h.update({"X-Signature-Timestamp": str(ts), "X-Signature-Ed25519": discord_ed25519(body, ts)})
    elif provider == "teams":
        h["Authorization"] = teams_hmac(body, secret)
    elif provider == "telegram":
        h["X-Telegram-Bot-Api-Secret-Token"] = secret
    elif provider == "standard_webhooks":
        msg_id = "msg_" + uuid.uuid4().hex
        h.update({"webhook-id": msg_id, "webhook-timestamp": str(ts),
                  "webhook-signature": standard_webhooks_v1(msg_id, ts, body, secret)})
    return h


def request(provider: str, text: str = "please review acme/api#12", form: bool = False,
            **extra: Any) -> tuple[bytes, dict[str, str]]:
    """A signed work-making request from the linked sender."""
    p = payload(provider, text, **extra)
    if form and provider == "mattermost":
        body = urlencode(p).encode()
        return body, sign(provider, body, content_type="application/x-www-form-urlencoded")
    body = json.dumps(p).encode()
    return body, sign(provider, body)


def slack_form(fields: dict[str, str] | None = None, raw: bytes | None = None,
               ts: int | None = None) -> tuple[bytes, dict[str, str]]:
    """A Slack form body (slash command or ``payload=``), signed over its exact bytes."""
    body = raw if raw is not None else urlencode(fields or {}).encode()
    return body, sign("slack", body, ts=ts, content_type="application/x-www-form-urlencoded")
