"""Damaged variants for every scheme: one byte changed, wrong key, missing header, stale and
future timestamps, malformed timestamps (digits only), signature lists, rotated secrets."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from switchboard.clock import FixedClock
from switchboard.errors import VerificationFailed
from switchboard.verifiers import (
    SignatureMalformed,
    SignatureMismatch,
    SignatureMissing,
    TimestampOutOfWindow,
    discord_signature,
    gitea_signature,
    shared_token,
    slack_signature,
    standard_webhooks,
    teams_hmac,
)
from tests import signers

NOW = 1_700_000_000
CLOCK = FixedClock(datetime.fromtimestamp(NOW, UTC))
BODY = b'{"name":"Jos\\u00e9","n":1}'
# RFC 8032 section 7.1 TEST 1 key pair.
SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
PUBLIC_HEX = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
OTHER_SEED = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TEAMS_TOKEN = "vqF0En+Z0ucuRTM/01o2GuhMH3hKKk/N2bOmlM31zaA="


def _changed(body: bytes) -> bytes:
    return body[:-2] + bytes([body[-2] ^ 1]) + body[-1:]


# -- Gitea / Forgejo ------------------------------------------------------------------

def _gitea(body: bytes, secret: str) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_gitea_and_forgejo_headers_verify_and_damage_fails() -> None:
    sig = _gitea(BODY, "s3cret")
    gitea_signature.verify(BODY, {"x-gitea-signature": sig}, ["s3cret"])
    gitea_signature.verify(BODY, {"x-forgejo-signature": sig, "x-gitea-signature": sig}, ["old", "s3cret"])
    with pytest.raises(SignatureMismatch):
        gitea_signature.verify(_changed(BODY), {"x-gitea-signature": sig}, ["s3cret"])
    with pytest.raises(SignatureMismatch):
        gitea_signature.verify(BODY, {"x-gitea-signature": sig}, ["wrong"])
    with pytest.raises(SignatureMismatch):  # one good header does not excuse a bad one
        gitea_signature.verify(BODY, {"x-forgejo-signature": sig, "x-gitea-signature": "0" * 64}, ["s3cret"])
    with pytest.raises(SignatureMissing):
        gitea_signature.verify(BODY, {"x-hub-signature-256": "sha256=" + sig}, ["s3cret"])
    with pytest.raises(SignatureMalformed):
        gitea_signature.verify(BODY, {"x-gitea-signature": "sha256=" + sig}, ["s3cret"])


# -- shared tokens ----------------------------------------------------------------------

def test_shared_token_constant_time_compare() -> None:
    shared_token.verify("tok-1", ["tok-0", "tok-1"])
    with pytest.raises(SignatureMismatch):
        shared_token.verify("tok-2", ["tok-1"])
    with pytest.raises(SignatureMismatch):
        shared_token.verify("tok-1 ", ["tok-1"])
    with pytest.raises(SignatureMissing):
        shared_token.verify("", ["tok-1"])
    with pytest.raises(SignatureMissing):
        shared_token.verify(None, ["tok-1"])
    with pytest.raises(SignatureMismatch):
        shared_token.verify("x", [""])


# -- Slack --------------------------------------------------------------------------------

SLACK_SECRET = "0123456789abcdef0123456789abcdef"


def _slack(body: bytes, ts: int | str, secret: str = SLACK_SECRET) -> dict[str, str]:
    return {"x-slack-request-timestamp": str(ts), "x-slack-signature": signers.slack_v0(body, ts, secret)}


@pytest.mark.parametrize("offset", [-30, 30, 300, -300])
def test_slack_window_edges_are_valid(offset: int) -> None:
    slack_signature.verify(BODY, _slack(BODY, NOW + offset), [SLACK_SECRET], CLOCK)


@pytest.mark.parametrize("offset", [-301, 301])
def test_slack_stale_and_future_timestamps_fail(offset: int) -> None:
    with pytest.raises(TimestampOutOfWindow):
        slack_signature.verify(BODY, _slack(BODY, NOW + offset), [SLACK_SECRET], CLOCK)


@pytest.mark.parametrize("ts", [f"{NOW}.5", "1e9", f" {NOW}", f"{NOW}\n", "-1", "0x10", "１７００"])
def test_slack_non_digit_timestamps_are_malformed(ts: str) -> None:
    headers = {"x-slack-request-timestamp": ts, "x-slack-signature": "v0=" + "0" * 64}
    with pytest.raises(SignatureMalformed):
        slack_signature.verify(BODY, headers, [SLACK_SECRET], CLOCK)


def test_slack_damage_fails() -> None:
    headers = _slack(BODY, NOW)
    with pytest.raises(SignatureMismatch):
        slack_signature.verify(_changed(BODY), headers, [SLACK_SECRET], CLOCK)
    with pytest.raises(SignatureMismatch):
        slack_signature.verify(BODY, headers, ["f" * 32], CLOCK)
    slack_signature.verify(BODY, headers, ["f" * 32, SLACK_SECRET], CLOCK)  # rotation
    for missing in headers:
        with pytest.raises(SignatureMissing):
            slack_signature.verify(BODY, {k: v for k, v in headers.items() if k != missing}, [SLACK_SECRET], CLOCK)
    with pytest.raises(SignatureMissing):
        slack_signature.verify(BODY, {**headers, "x-slack-request-timestamp": ""}, [SLACK_SECRET], CLOCK)
    with pytest.raises(SignatureMalformed):
        slack_signature.verify(BODY, {**headers, "x-slack-signature": "v1=" + "0" * 64}, [SLACK_SECRET], CLOCK)
    # The timestamp is part of the signed string: moving it breaks the signature.
    with pytest.raises(SignatureMismatch):
        slack_signature.verify(BODY, {**headers, "x-slack-request-timestamp": str(NOW + 1)}, [SLACK_SECRET], CLOCK)


# -- Discord --------------------------------------------------------------------------------

def _discord(body: bytes, ts: str = str(NOW), seed: bytes = SEED) -> dict[str, str]:
    sig = Ed25519PrivateKey.from_private_bytes(seed).sign(ts.encode() + body).hex()
    return {"x-signature-ed25519": sig, "x-signature-timestamp": ts}


def test_discord_valid_and_damaged() -> None:
    headers = _discord(BODY)
    discord_signature.verify(BODY, headers, [PUBLIC_HEX])
    discord_signature.verify(BODY, {**headers, "x-signature-ed25519": headers["x-signature-ed25519"].upper()},
                             [PUBLIC_HEX])
    with pytest.raises(SignatureMismatch):
        discord_signature.verify(_changed(BODY), headers, [PUBLIC_HEX])
    with pytest.raises(SignatureMismatch):
        discord_signature.verify(BODY, _discord(BODY, seed=OTHER_SEED), [PUBLIC_HEX])
    with pytest.raises(SignatureMismatch):
        discord_signature.verify(BODY, {**headers, "x-signature-timestamp": str(NOW + 1)}, [PUBLIC_HEX])
    with pytest.raises(SignatureMismatch):  # webhook-faults.md #7: 128 zeros
        discord_signature.verify(b'{"type":1}', {"x-signature-ed25519": "0" * 128,
                                                 "x-signature-timestamp": "1700000000"}, [PUBLIC_HEX])
    with pytest.raises(SignatureMissing):
        discord_signature.verify(BODY, {"x-signature-timestamp": str(NOW)}, [PUBLIC_HEX])
    with pytest.raises(SignatureMissing):
        discord_signature.verify(BODY, {"x-signature-ed25519": headers["x-signature-ed25519"]}, [PUBLIC_HEX])
    with pytest.raises(SignatureMalformed):
        discord_signature.verify(BODY, {**headers, "x-signature-ed25519": "zz" * 64}, [PUBLIC_HEX])
    with pytest.raises(SignatureMalformed):
        discord_signature.verify(BODY, {**headers, "x-signature-timestamp": "1.5"}, [PUBLIC_HEX])
    # Rotation: an old key and the current one.
    other_public = Ed25519PrivateKey.from_private_bytes(OTHER_SEED).public_key().public_bytes_raw().hex()
    discord_signature.verify(BODY, headers, [other_public, PUBLIC_HEX])


def test_discord_public_key_must_be_64_hex_digits() -> None:
    for bad in ("", "zz" * 32, PUBLIC_HEX[:-2], PUBLIC_HEX + "00", " " + PUBLIC_HEX[1:]):
        with pytest.raises(ValueError):
            discord_signature.load_public_key(bad)


# -- Teams ------------------------------------------------------------------------------------

def test_teams_hmac_valid_and_damaged() -> None:
    headers = {"authorization": signers.teams_hmac(BODY, TEAMS_TOKEN)}
    key = base64.b64decode(TEAMS_TOKEN)
    assert headers["authorization"] == "HMAC " + base64.b64encode(hmac.new(key, BODY, hashlib.sha256).digest()).decode()
    teams_hmac.verify(BODY, headers, [TEAMS_TOKEN])
    # The key is the decoded token, not its text.
    text_keyed = base64.b64encode(hmac.new(TEAMS_TOKEN.encode(), BODY, hashlib.sha256).digest()).decode()
    with pytest.raises(SignatureMismatch):
        teams_hmac.verify(BODY, {"authorization": "HMAC " + text_keyed}, [TEAMS_TOKEN])
    with pytest.raises(SignatureMismatch):
        teams_hmac.verify(_changed(BODY), headers, [TEAMS_TOKEN])
    other = base64.b64encode(b"k" * 32).decode()
    with pytest.raises(SignatureMismatch):
        teams_hmac.verify(BODY, headers, [other])
    teams_hmac.verify(BODY, headers, [other, TEAMS_TOKEN])
    with pytest.raises(SignatureMissing):
        teams_hmac.verify(BODY, {}, [TEAMS_TOKEN])
    for bad in ("Bearer abc", "HMAC", "HMAC !!!", "HMAC " + "A" * 44):
        with pytest.raises(SignatureMalformed):
            teams_hmac.verify(BODY, {"authorization": bad}, [TEAMS_TOKEN])


# -- Standard Webhooks --------------------------------------------------------------------------

def _sw(body: bytes, ts: int | str = NOW, msg_id: str = "msg_1", secret: str = WHSEC,
        prefix: str = "webhook") -> dict[str, str]:
    return {f"{prefix}-id": msg_id, f"{prefix}-timestamp": str(ts),
            f"{prefix}-signature": signers.standard_webhooks_v1(msg_id, ts, body, secret)}


def test_standard_webhooks_valid_both_header_families() -> None:
    standard_webhooks.verify(BODY, _sw(BODY), [WHSEC], CLOCK)
    standard_webhooks.verify(BODY, _sw(BODY, prefix="svix"), [WHSEC], CLOCK)


@pytest.mark.parametrize("offset,ok", [(-30, True), (30, True), (-301, False), (301, False)])
def test_standard_webhooks_window(offset: int, ok: bool) -> None:
    headers = _sw(BODY, NOW + offset)
    if ok:
        standard_webhooks.verify(BODY, headers, [WHSEC], CLOCK)
    else:
        with pytest.raises(TimestampOutOfWindow):
            standard_webhooks.verify(BODY, headers, [WHSEC], CLOCK)


@pytest.mark.parametrize("ts", [f"{NOW}.5", "1e9", f" {NOW}"])
def test_standard_webhooks_timestamp_digits_only(ts: str) -> None:
    headers = {**_sw(BODY), "webhook-timestamp": ts}
    with pytest.raises(SignatureMalformed):
        standard_webhooks.verify(BODY, headers, [WHSEC], CLOCK)
    with pytest.raises(SignatureMissing):
        standard_webhooks.verify(BODY, {**headers, "webhook-timestamp": ""}, [WHSEC], CLOCK)


def test_standard_webhooks_signature_lists_fault9() -> None:
    good = _sw(BODY)["webhook-signature"]
    lists = [f"v1,BADSIG v2,OTHER {good}", f"nocomma  {good}", f"v1,{'A' * 44} v1a,xx {good} v1,",
             f"{good} v1,!!!"]
    for value in lists:
        standard_webhooks.verify(BODY, {**_sw(BODY), "webhook-signature": value}, [WHSEC], CLOCK)
    for value in ("v1,BADSIG v2,OTHER", "nocomma", " ", "v1,", "v2," + good.split(",")[1]):
        with pytest.raises(VerificationFailed):
            standard_webhooks.verify(BODY, {**_sw(BODY), "webhook-signature": value}, [WHSEC], CLOCK)


def test_standard_webhooks_damage_and_rotation() -> None:
    headers = _sw(BODY)
    with pytest.raises(SignatureMismatch):
        standard_webhooks.verify(_changed(BODY), headers, [WHSEC], CLOCK)
    other = "whsec_" + base64.b64encode(b"x" * 32).decode()
    with pytest.raises(SignatureMismatch):
        standard_webhooks.verify(BODY, headers, [other], CLOCK)
    standard_webhooks.verify(BODY, headers, [other, WHSEC], CLOCK)
    with pytest.raises(SignatureMismatch):  # the id is signed
        standard_webhooks.verify(BODY, {**headers, "webhook-id": "msg_2"}, [WHSEC], CLOCK)
    for name in headers:
        with pytest.raises((SignatureMissing, SignatureMalformed)):
            standard_webhooks.verify(BODY, {k: v for k, v in headers.items() if k != name}, [WHSEC], CLOCK)


def test_standard_webhooks_v1a_ed25519() -> None:
    private = Ed25519PrivateKey.from_private_bytes(SEED)
    whpk = "whpk_" + base64.b64encode(bytes.fromhex(PUBLIC_HEX)).decode()
    content = f"msg_1.{NOW}.".encode() + BODY
    sig = "v1a," + base64.b64encode(private.sign(content)).decode()
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(NOW), "webhook-signature": f"v1,{'A' * 44} {sig}"}
    standard_webhooks.verify(BODY, headers, [whpk], CLOCK)
    standard_webhooks.verify(BODY, headers, [WHSEC, whpk], CLOCK)
    with pytest.raises(SignatureMismatch):
        standard_webhooks.verify(_changed(BODY), headers, [whpk], CLOCK)
    with pytest.raises(SignatureMismatch):  # an Ed25519 signature never passes as v1 HMAC
        standard_webhooks.verify(BODY, headers, [WHSEC], CLOCK)


@pytest.mark.parametrize("secret", ["v1,whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not*base64",
                                    "whsec_" + base64.b64encode(b"x" * 23).decode(), "whsec_", "",
                                    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", "whpk_" + base64.b64encode(b"k" * 31).decode()])
def test_standard_webhooks_bad_keys_are_refused_fault8(secret: str) -> None:
    with pytest.raises(ValueError):
        standard_webhooks.parse_key(secret)


def test_standard_webhooks_key_forms() -> None:
    assert standard_webhooks.parse_key(WHSEC).material == base64.b64decode(WHSEC[6:])
    assert standard_webhooks.parse_key(WHSEC[6:]).kind == "hmac"
