"""Every usable entry of ``../shared/cases/vectors.json`` (our copy), by scheme.

The Teams entry is ``incomplete`` (no body published): only its key handling is checked. The
Stripe entry is ``format-only`` and Twilio is not a provider of ours; both are skipped.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from switchboard.clock import FixedClock
from switchboard.errors import VerificationFailed
from switchboard.verifiers import discord_signature, hub_signature, slack_signature, standard_webhooks, teams_hmac
from tests.conftest import case_bytes


def _vectors() -> list[dict]:
    return json.loads(case_bytes("vectors.json"))


def _clock(ts: int) -> FixedClock:
    return FixedClock(datetime.fromtimestamp(ts, timezone.utc))


def _lower(headers: dict) -> dict:
    return {k.lower(): v for k, v in headers.items()}


def _by(source: str) -> list[dict]:
    return [v for v in _vectors() if v["source"].startswith(source)]


def test_github_sha256_vector() -> None:
    for v in _by("GitHub"):
        if "X-Hub-Signature-256" in v["headers"]:
            hub_signature.verify(v["body"].encode(), v["headers"]["X-Hub-Signature-256"], [v["secret_or_key"]])


def test_github_sha1_only_request_is_refused_by_the_sha256_scheme() -> None:
    (v,) = [v for v in _by("GitHub") if "X-Hub-Signature" in v["headers"]]
    with pytest.raises(VerificationFailed):
        hub_signature.verify(v["body"].encode(), None, [v["secret_or_key"]])


def test_slack_vector() -> None:
    (v,) = _by("Slack")
    ts = int(v["headers"]["X-Slack-Request-Timestamp"])
    slack_signature.verify(v["body"].encode(), _lower(v["headers"]), [v["secret_or_key"]], _clock(ts + 10))
    assert slack_signature.sign(v["body"].encode(), ts, v["secret_or_key"]) == v["expected"]["signature"]


@pytest.mark.parametrize("v", _by("Standard Webhooks") + _by("Svix"), ids=lambda v: v["scheme"])
def test_standard_webhooks_and_svix_vectors(v: dict) -> None:
    headers = _lower(v["headers"])
    ts = int(headers.get("webhook-timestamp") or headers["svix-timestamp"])
    at = ts
    if "too old" in v["scheme"]:
        at = ts + 301
    elif "future" in v["scheme"]:
        at = ts - 301
    verify = lambda: standard_webhooks.verify(v["body"].encode(), headers, [v["secret_or_key"]], _clock(at))  # noqa: E731
    if v["expected"]["verdict"] == "valid":
        verify()
    else:
        with pytest.raises(VerificationFailed):
            verify()


@pytest.mark.parametrize("v", _by("Ed25519"), ids=lambda v: v["body"] or "empty")
def test_rfc8032_vectors(v: dict) -> None:
    key = v["secret_or_key"]
    message = bytes.fromhex(v["body"])
    signature = bytes.fromhex(v["expected"]["signature"])
    public = discord_signature.load_public_key(key["public_key_hex"])
    discord_signature.verify_ed25519(message, signature, [public])
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(key["private_seed_hex"]))
    assert private.sign(message) == signature  # Ed25519 is deterministic
    flipped = bytearray(signature)
    flipped[0] ^= 1
    with pytest.raises(VerificationFailed):
        discord_signature.verify_ed25519(message, bytes(flipped), [public])
    with pytest.raises(VerificationFailed):
        discord_signature.verify_ed25519(message + b"\x00", signature, [public])


def test_teams_incomplete_vector_checks_key_handling_only() -> None:
    (v,) = _by("Microsoft Teams")
    assert v["expected"]["verdict"] == "incomplete"
    assert len(teams_hmac.decode_token(v["secret_or_key"])) == 32
    # The decoded bytes are the key: signing with them matches our own sign().
    assert teams_hmac.sign(b"{}", v["secret_or_key"]).startswith("HMAC ")
