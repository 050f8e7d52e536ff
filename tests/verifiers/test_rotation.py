"""Every scheme during a secret rotation, and every signature compared in full (issue 17).

A source holds several valid secrets while a sender switches over (``source rotate-secret``):
a delivery signed with *any* of them, at *any* position of the list, verifies, and one signed
with none of them does not. A signature that differs from the right one in its last (or
first, or a middle) character fails: a prefix-only comparison would let it through.
Signatures are computed with :mod:`tests.signers` (``hmac``/``cryptography`` directly).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from switchboard.clock import FixedClock
from switchboard.verifiers import (
    SignatureMismatch,
    discord_signature,
    gitea_signature,
    hub_signature,
    shared_token,
    slack_signature,
    standard_webhooks,
    teams_hmac,
)
from tests import signers

NOW = 1_700_000_000
CLOCK = FixedClock(datetime.fromtimestamp(NOW, UTC))
BODY = b'{"action":"opened","issue":{"number":12,"title":"please review acme/api#12"}}'
# Three valid secrets per scheme: the oldest first, as rotate-secret leaves them.
HMAC_SECRETS = ["old-secret-1", "middle-secret-2", "new-secret-3"]
SLACK_SECRETS = ["8f742231b10e8888abcd99ddd0ee85a5", "0123456789abcdef0123456789abcdef", "f" * 32]
WHSECS = ["whsec_" + base64.b64encode(bytes([n]) * 32).decode() for n in (1, 2, 3)]
TEAMS_TOKENS = [base64.b64encode(bytes([n]) * 32).decode() for n in (4, 5, 6)]
# RFC 8032 section 7.1 TEST 1, 2 and 3 seeds.
ED_SEEDS = [bytes.fromhex(h) for h in (
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
)]


def _ed_public_hex(seed: bytes) -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


ED_PUBLIC = [_ed_public_hex(s) for s in ED_SEEDS]
WHPKS = ["whpk_" + base64.b64encode(bytes.fromhex(h)).decode() for h in ED_PUBLIC]


# Each scheme: (valid secrets, sign(secret index) -> headers, verify(headers, secrets)).
Scheme = tuple[list[str], Callable[[int], dict[str, str]], Callable[[dict[str, str], list[str]], None]]


def _github_sha256() -> Scheme:
    return (HMAC_SECRETS, lambda i: {"sig": signers.hub_sha256(BODY, HMAC_SECRETS[i])},
            lambda h, s: hub_signature.verify(BODY, h["sig"], s))


def _github_sha1() -> Scheme:
    return (HMAC_SECRETS, lambda i: {"sig": signers.hub_sha1(BODY, HMAC_SECRETS[i])},
            lambda h, s: hub_signature.verify_sha1(BODY, h["sig"], s))


def _gitea() -> Scheme:
    return (HMAC_SECRETS, lambda i: {"x-gitea-signature": signers.hub_sha256(BODY, HMAC_SECRETS[i])[7:]},
            lambda h, s: gitea_signature.verify(BODY, h, s))


def _forgejo() -> Scheme:
    def sign(i: int) -> dict[str, str]:
        sig = signers.hub_sha256(BODY, HMAC_SECRETS[i])[7:]
        return {"x-forgejo-signature": sig, "x-gitea-signature": sig}
    return HMAC_SECRETS, sign, lambda h, s: gitea_signature.verify(BODY, h, s)


def _slack() -> Scheme:
    return (SLACK_SECRETS, lambda i: {"x-slack-request-timestamp": str(NOW),
                                      "x-slack-signature": signers.slack_v0(BODY, NOW, SLACK_SECRETS[i])},
            lambda h, s: slack_signature.verify(BODY, h, s, CLOCK))


def _standard_webhooks_v1() -> Scheme:
    return (WHSECS, lambda i: {"webhook-id": "msg_1", "webhook-timestamp": str(NOW),
                               "webhook-signature": signers.standard_webhooks_v1("msg_1", NOW, BODY, WHSECS[i])},
            lambda h, s: standard_webhooks.verify(BODY, h, s, CLOCK))


def _standard_webhooks_v1a() -> Scheme:
    return (WHPKS, lambda i: {"webhook-id": "msg_1", "webhook-timestamp": str(NOW),
                              "webhook-signature": signers.standard_webhooks_v1a("msg_1", NOW, BODY, ED_SEEDS[i])},
            lambda h, s: standard_webhooks.verify(BODY, h, s, CLOCK))


def _teams() -> Scheme:
    return (TEAMS_TOKENS, lambda i: {"authorization": signers.teams_hmac(BODY, TEAMS_TOKENS[i])},
            lambda h, s: teams_hmac.verify(BODY, h, s))


def _discord() -> Scheme:
    return (ED_PUBLIC, lambda i: {"x-signature-timestamp": str(NOW),
                                  "x-signature-ed25519": signers.discord_ed25519(BODY, NOW, ED_SEEDS[i])},
            lambda h, s: discord_signature.verify(BODY, h, s))


def _shared_token() -> Scheme:
    return HMAC_SECRETS, lambda i: {"token": HMAC_SECRETS[i]}, lambda h, s: shared_token.verify(h["token"], s)


SCHEMES = {"github_sha256": _github_sha256, "github_sha1": _github_sha1, "gitea": _gitea, "forgejo": _forgejo,
           "slack": _slack, "standard_webhooks_v1": _standard_webhooks_v1,
           "standard_webhooks_v1a": _standard_webhooks_v1a, "teams": _teams, "discord": _discord,
           "shared_token": _shared_token}


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("position", [0, 1, 2])
def test_each_valid_secret_verifies_at_each_position_during_rotation(name: str, position: int) -> None:
    secrets, sign, verify = SCHEMES[name]()
    headers = sign(position)
    verify(headers, secrets)  # all three valid, the signing one at `position`
    # The signing secret alone, first or last among the others: still accepted.
    others = [s for n, s in enumerate(secrets) if n != position]
    verify(headers, [secrets[position], *others])
    verify(headers, [*others, secrets[position]])
    with pytest.raises(SignatureMismatch):
        verify(headers, others)  # retired: refused


def _damage(value: str, index: int) -> str:
    """``value`` with the character at ``index`` replaced by another of the same alphabet."""
    c = value[index]
    swap = {"0": "1", "A": "B", "a": "b", "=": "="}.get(c, "0" if c != "0" else "1")
    if c.isdigit():
        swap = str((int(c) + 1) % 10)
    elif c.isalpha():
        swap = chr(ord(c) + 1) if c not in "zZfF" else chr(ord(c) - 1)
    return value[:index] + swap + value[index + 1:]


def _b64_damage(entry_b64: str, byte_index: int) -> str:
    raw = bytearray(base64.b64decode(entry_b64))
    raw[byte_index] ^= 1
    return base64.b64encode(bytes(raw)).decode()


# Where each scheme's signature lives: (header, prefix before the signature, encoding).
WHERE = {
    "github_sha256": ("sig", "sha256=", "hex"), "github_sha1": ("sig", "sha1=", "hex"),
    "gitea": ("x-gitea-signature", "", "hex"), "slack": ("x-slack-signature", "v0=", "hex"),
    "standard_webhooks_v1": ("webhook-signature", "v1,", "b64"),
    "standard_webhooks_v1a": ("webhook-signature", "v1a,", "b64"), "teams": ("authorization", "HMAC ", "b64"),
    "discord": ("x-signature-ed25519", "", "hex"),
}


@pytest.mark.parametrize("name", WHERE)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_signature_differing_in_one_place_fails(name: str, where: str) -> None:
    """Compared in full: a mismatch in the last character fails as surely as in the first."""
    secrets, sign, verify = SCHEMES[name]()
    header, prefix, encoding = WHERE[name]
    headers = sign(1)
    value = headers[header][len(prefix):]
    if encoding == "hex":
        index = {"first": 0, "middle": len(value) // 2, "last": len(value) - 1}[where]
        damaged = _damage(value, index)
    else:
        n = len(base64.b64decode(value))
        damaged = _b64_damage(value, {"first": 0, "middle": n // 2, "last": n - 1}[where])
    assert damaged != value
    with pytest.raises(SignatureMismatch):
        verify({**headers, header: prefix + damaged}, secrets)


@pytest.mark.parametrize("token", ["middle-secret-", "middle-secret-3", "middle-secret-22", "Middle-secret-2",
                                   "middle-secret-2 "])
def test_a_shared_token_must_match_in_full(token: str) -> None:
    with pytest.raises(SignatureMismatch):
        shared_token.verify(token, HMAC_SECRETS)


def test_one_valid_entry_among_several_in_a_standard_webhooks_list_at_each_position() -> None:
    good = signers.standard_webhooks_v1("msg_1", NOW, BODY, WHSECS[1])
    wrong = signers.standard_webhooks_v1("msg_1", NOW, BODY, "whsec_" + base64.b64encode(b"w" * 32).decode())
    ed = signers.standard_webhooks_v1a("msg_1", NOW, BODY, ED_SEEDS[0])
    for entries in ([good, wrong, ed], [wrong, good, ed], [ed, wrong, good]):
        headers = {"webhook-id": "msg_1", "webhook-timestamp": str(NOW), "webhook-signature": " ".join(entries)}
        standard_webhooks.verify(BODY, headers, WHSECS, CLOCK)
        standard_webhooks.verify(BODY, headers, [WHSECS[1]], CLOCK)
        with pytest.raises(SignatureMismatch):
            standard_webhooks.verify(BODY, headers, [WHSECS[0], WHSECS[2]], CLOCK)
