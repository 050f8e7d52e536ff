"""The reason each verifier gives, and the edges mutation testing found untested (issue 17).

A malformed signature header raises :class:`SignatureMalformed` with a reason naming the
header and its expected form (never the value), and a key refused at configuration time is
reported with the ``ValueError``'s text, naming the key's form. Also here: keys of the wrong shape
listed *before* a good one, non-default replay windows, ``bytes`` secrets, tokens that are
not UTF-8, and the product's ``sign()`` helpers (used by tools) against the independent
signers of :mod:`tests.signers`.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from switchboard.clock import FixedClock
from switchboard.verifiers import (
    SignatureMalformed,
    SignatureMismatch,
    SignatureMissing,
    TimestampOutOfWindow,
    discord_signature,
    gitea_signature,
    hub_signature,
    shared_token,
    slack_signature,
    standard_webhooks,
    teams_hmac,
    timestamp,
)
from tests import signers

NOW = 1_700_000_000
CLOCK = FixedClock(datetime.fromtimestamp(NOW, UTC))
BODY = b'{"text":"please review"}'
WHSEC = "whsec_" + base64.b64encode(b"k" * 32).decode()
TEAMS = base64.b64encode(b"t" * 32).decode()
PUBLIC_HEX = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
WHPK = "whpk_" + base64.b64encode(bytes.fromhex(PUBLIC_HEX)).decode()


def _message(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value)


# -- malformed headers: the detail names the header and its form ---------------------------------

@pytest.mark.parametrize(("call", "message"), [
    (lambda: hub_signature.verify(BODY, "sha1=" + "0" * 40, ["s"]),
     "X-Hub-Signature-256 must be 'sha256=' followed by 64 hex digits"),
    (lambda: hub_signature.verify_sha1(BODY, "sha256=" + "0" * 64, ["s"]),
     "X-Hub-Signature must be 'sha1=' followed by 40 hex digits"),
    (lambda: gitea_signature.verify(BODY, {"x-gitea-signature": "zz"}, ["s"]),
     "X-Gitea-Signature / X-Forgejo-Signature must be 64 hex digits"),
    (lambda: slack_signature.verify(BODY, {"x-slack-signature": "v1=00", "x-slack-request-timestamp": str(NOW)},
                                    ["s"], CLOCK),
     "X-Slack-Signature must be 'v0=' followed by 64 hex digits"),
    (lambda: slack_signature.verify(BODY, {"x-slack-signature": "v0=00", "x-slack-request-timestamp": "1e9"},
                                    ["s"], CLOCK),
     "X-Slack-Request-Timestamp must be Unix seconds in ASCII digits"),
    (lambda: discord_signature.verify(BODY, {"x-signature-ed25519": "00", "x-signature-timestamp": "1.5"},
                                      [PUBLIC_HEX]),
     "X-Signature-Timestamp must be Unix seconds in ASCII digits"),
    (lambda: discord_signature.verify(BODY, {"x-signature-ed25519": "00", "x-signature-timestamp": str(NOW)},
                                      [PUBLIC_HEX]),
     "X-Signature-Ed25519 must be 128 hex digits"),
    (lambda: teams_hmac.verify(BODY, {"authorization": "Bearer x"}, [TEAMS]),
     "Authorization must be 'HMAC ' followed by a base64 SHA-256 digest"),
    (lambda: standard_webhooks.verify(BODY, {"webhook-id": "a b", "webhook-timestamp": str(NOW),
                                             "webhook-signature": "v1,AAAA"}, [WHSEC], CLOCK),
     "webhook-id must be 1-256 printable ASCII characters"),
    (lambda: standard_webhooks.verify(BODY, {"svix-id": "m", "svix-timestamp": " 1", "svix-signature": "v1,AAAA"},
                                      [WHSEC], CLOCK),
     "svix-timestamp must be Unix seconds in ASCII digits"),
])
def test_a_malformed_header_is_named_with_its_expected_form(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SignatureMalformed) as exc:
        call()
    assert _message(exc) == message


# -- configuration-time key checks: the reason, never the key --------------------------------------

@pytest.mark.parametrize(("call", "message"), [
    (lambda: discord_signature.load_public_key("abc"), "an Ed25519 public key is 64 hex digits"),
    (lambda: teams_hmac.decode_token("abcd!efgh"), "a Teams security token is base64"),
    (lambda: teams_hmac.decode_token(""), "a Teams security token must not be empty"),
    (lambda: standard_webhooks.parse_key("whpk_abc!"), "a whpk_ public key must be strict base64 after the prefix"),
    (lambda: standard_webhooks.parse_key("whpk_" + base64.b64encode(b"x" * 31).decode()),
     "a whpk_ public key must decode to 32 bytes (Ed25519)"),
    (lambda: standard_webhooks.parse_key("v1,whsec_abcd"),
     "a Standard Webhooks secret is 'whsec_' + strict base64 (e.g. not 'v1,whsec_...')"),
    (lambda: standard_webhooks.parse_key("whsec_"),
     "a Standard Webhooks secret is 'whsec_' + strict base64 (e.g. not 'v1,whsec_...')"),
    (lambda: standard_webhooks.parse_key("whsec_" + base64.b64encode(b"k" * 65).decode()),
     "a Standard Webhooks secret must decode to 24-64 bytes"),
])
def test_an_unusable_key_is_refused_with_its_reason(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as exc:
        call()
    assert _message(exc) == message


def test_standard_webhooks_key_kinds_and_length_bounds() -> None:
    assert standard_webhooks.parse_key(WHPK).kind == "ed25519"
    assert standard_webhooks.parse_key(WHSEC).kind == "hmac"
    assert len(standard_webhooks.parse_key("whsec_" + base64.b64encode(b"k" * 64).decode()).material) == 64
    assert len(standard_webhooks.parse_key("whsec_" + base64.b64encode(b"k" * 24).decode()).material) == 24


# -- a refused key listed before a good one does not stop the search -------------------------------

def test_keys_of_the_wrong_shape_before_the_right_one_are_skipped_not_fatal() -> None:
    ts = str(NOW)
    discord_signature.verify(BODY, {"x-signature-ed25519": signers.discord_ed25519(BODY, ts),
                                    "x-signature-timestamp": ts}, ["not-hex", PUBLIC_HEX])
    teams_hmac.verify(BODY, {"authorization": signers.teams_hmac(BODY, TEAMS)}, ["!!", TEAMS])
    sw = {"webhook-id": "m", "webhook-timestamp": ts, "webhook-signature": signers.standard_webhooks_v1("m", ts, BODY, WHSEC)}
    standard_webhooks.verify(BODY, sw, ["v1,whsec_bad", WHSEC], CLOCK)
    shared_token.verify("tok", ["", "tok"])


# -- replay windows other than the default -----------------------------------------------------------

def test_a_configured_tolerance_replaces_the_default_window() -> None:
    old = NOW - 60
    slack = {"x-slack-request-timestamp": str(old), "x-slack-signature": signers.slack_v0(BODY, old, "s")}
    slack_signature.verify(BODY, slack, ["s"], CLOCK)  # inside the default 300 s
    with pytest.raises(TimestampOutOfWindow):
        slack_signature.verify(BODY, slack, ["s"], CLOCK, tolerance=30)
    sw = {"webhook-id": "m", "webhook-timestamp": str(old),
          "webhook-signature": signers.standard_webhooks_v1("m", old, BODY, WHSEC)}
    standard_webhooks.verify(BODY, sw, [WHSEC], CLOCK)
    with pytest.raises(TimestampOutOfWindow):
        standard_webhooks.verify(BODY, sw, [WHSEC], CLOCK, tolerance=30)
    timestamp.check_window(old, CLOCK, 60)
    with pytest.raises(TimestampOutOfWindow):
        timestamp.check_window(old, CLOCK, 59)


# -- secrets as bytes, tokens that are not UTF-8 -------------------------------------------------------

def test_bytes_secrets_are_used_as_the_key_itself() -> None:
    key = b"\xffraw-key"
    hub_signature.verify(BODY, signers.hub_sha256(BODY, key), [key])
    hub_signature.verify_sha1(BODY, signers.hub_sha1(BODY, key), [key])
    gitea_signature.verify(BODY, {"x-gitea-signature": signers.hub_sha256(BODY, key)[7:]}, [key])
    assert hub_signature.sign(BODY, key) == signers.hub_sha256(BODY, key)
    assert hub_signature.sign_sha1(BODY, key) == signers.hub_sha1(BODY, key)


def test_a_token_with_a_lone_surrogate_is_a_mismatch_not_a_crash() -> None:
    """A JSON body may carry ``"\\udcff"`` (Mattermost's ``token`` field)."""
    with pytest.raises(SignatureMismatch):
        shared_token.verify("\udcff", ["tok"])
    with pytest.raises(SignatureMismatch):
        shared_token.verify("tok\udcff", ["tok"])


def test_the_legacy_sha1_header_missing_or_empty_is_missing() -> None:
    for header in (None, ""):
        with pytest.raises(SignatureMissing):
            hub_signature.verify_sha1(BODY, header, ["s"])


# -- Standard Webhooks header families, ids and signature lists ---------------------------------------

@pytest.mark.parametrize("present", ["webhook-id", "webhook-signature", "webhook-timestamp"])
def test_any_webhook_header_selects_the_webhook_family(present: str) -> None:
    assert standard_webhooks.header_names({present: "x", "svix-id": "y"}) == (
        "webhook-id", "webhook-timestamp", "webhook-signature")
    assert standard_webhooks.header_names({"svix-id": "y"}) == ("svix-id", "svix-timestamp", "svix-signature")


def test_message_id_is_the_stripped_id_header_at_most_256_characters() -> None:
    assert standard_webhooks.message_id({"webhook-id": " msg_1 "}) == "msg_1"
    assert standard_webhooks.message_id({"svix-id": "msg_2"}) == "msg_2"
    assert standard_webhooks.message_id({"webhook-id": "m" * 300}) == "m" * 256
    assert standard_webhooks.message_id({"webhook-id": "  "}) is None
    assert standard_webhooks.message_id({}) is None


def test_signature_entries_are_separated_by_single_spaces_only() -> None:
    good = signers.standard_webhooks_v1("m", NOW, BODY, WHSEC)
    headers = {"webhook-id": "m", "webhook-timestamp": str(NOW)}
    standard_webhooks.verify(BODY, {**headers, "webhook-signature": f"v1,AAAA {good}"}, [WHSEC], CLOCK)
    with pytest.raises(SignatureMismatch):  # a tab is not a separator: one broken entry
        standard_webhooks.verify(BODY, {**headers, "webhook-signature": f"v1,AAAA\t{good}"}, [WHSEC], CLOCK)


def test_an_ed25519_signature_under_an_unknown_version_is_skipped() -> None:
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    entry = signers.standard_webhooks_v1a("m", NOW, BODY, seed)
    headers = {"webhook-id": "m", "webhook-timestamp": str(NOW)}
    standard_webhooks.verify(BODY, {**headers, "webhook-signature": entry}, [WHPK], CLOCK)
    with pytest.raises(SignatureMismatch):
        standard_webhooks.verify(BODY, {**headers, "webhook-signature": "v2," + entry[4:]}, [WHPK], CLOCK)


# -- the product's sign() helpers (for tools) agree with the independent signers ------------------------

def test_product_sign_helpers_agree_with_the_independent_signers() -> None:
    assert hub_signature.sign(BODY, "s3cret") == signers.hub_sha256(BODY, "s3cret")
    assert hub_signature.sign_sha1(BODY, "s3cret") == signers.hub_sha1(BODY, "s3cret")
    assert slack_signature.sign(BODY, NOW, "s3cret") == signers.slack_v0(BODY, NOW, "s3cret")
    assert standard_webhooks.sign("m", NOW, BODY, WHSEC) == signers.standard_webhooks_v1("m", NOW, BODY, WHSEC)
    assert teams_hmac.sign(BODY, TEAMS) == signers.teams_hmac(BODY, TEAMS)
