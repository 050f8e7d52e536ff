"""The test signers of ``tests/signers.py`` reproduce the providers' published vectors.

They compute signatures with ``hmac``/``cryptography`` directly, so a verifier test that signs
with them does not share a bug with the product's own ``sign()`` helpers (issue 17). Each signer
is checked here against ``../shared/cases/vectors.json`` (our copy), never against the product.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests import signers
from tests.conftest import case_bytes


def _by(source: str) -> list[dict]:
    return [v for v in json.loads(case_bytes("vectors.json")) if v["source"].startswith(source)]


def test_github_signers_match_the_published_vectors() -> None:
    for v in _by("GitHub"):
        body = v["body"].encode()
        if "X-Hub-Signature-256" in v["headers"]:
            assert signers.hub_sha256(body, v["secret_or_key"]) == v["headers"]["X-Hub-Signature-256"]
        else:
            assert signers.hub_sha1(body, v["secret_or_key"]) == v["headers"]["X-Hub-Signature"]


def test_slack_signer_matches_the_published_vector() -> None:
    (v,) = _by("Slack")
    ts = v["headers"]["X-Slack-Request-Timestamp"]
    assert signers.slack_v0(v["body"].encode(), ts, v["secret_or_key"]) == v["headers"]["X-Slack-Signature"]


@pytest.mark.parametrize("v", [v for v in _by("Standard Webhooks") + _by("Svix")
                               if v["expected"]["verdict"] == "valid"], ids=lambda v: v["scheme"])
def test_standard_webhooks_signer_matches_the_published_vectors(v: dict) -> None:
    headers = {k.lower(): val for k, val in v["headers"].items()}
    prefix = "webhook" if "webhook-id" in headers else "svix"
    secret = v["secret_or_key"]
    entry = signers.standard_webhooks_v1(headers[f"{prefix}-id"], headers[f"{prefix}-timestamp"], v["body"].encode(),
                                         secret if secret.startswith("whsec_") else "whsec_" + secret)
    assert entry in headers[f"{prefix}-signature"].split(" ")


def test_ed25519_signers_match_rfc8032() -> None:
    for v in _by("Ed25519"):
        seed = bytes.fromhex(v["secret_or_key"]["private_seed_hex"])
        message = bytes.fromhex(v["body"])
        # Discord signs timestamp + body: an empty timestamp leaves the RFC's message as is.
        assert signers.discord_ed25519(message, "", seed) == v["expected"]["signature"]
        entry = signers.standard_webhooks_v1a("", "", b"", seed)
        assert entry.startswith("v1a,") and len(base64.b64decode(entry[4:])) == 64


def test_teams_signer_keys_with_the_decoded_token() -> None:
    """Microsoft publishes no body for its token, so the RFC 4231 test case 2 stands in for it.

    HMAC-SHA256 with key "Jefe" over "what do ya want for nothing?" (RFC 4231 section 4.3).
    """
    token = base64.b64encode(b"Jefe").decode()
    expected = bytes.fromhex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    assert signers.teams_hmac(b"what do ya want for nothing?", token) == "HMAC " + base64.b64encode(expected).decode()
