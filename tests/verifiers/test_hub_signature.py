"""GitHub's X-Hub-Signature-256: the published vector, then the damaged variants."""

from __future__ import annotations

import json

import pytest

from switchboard.errors import VerificationFailed
from switchboard.verifiers import SignatureMalformed, hub_signature
from tests.conftest import case_bytes

SECRET = "It's a Secret to Everybody"
BODY = b"Hello, World!"
SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def _github_vectors() -> list[dict]:
    vectors = json.loads(case_bytes("vectors.json"))
    return [v for v in vectors if v.get("source") == "GitHub" and "X-Hub-Signature-256" in v.get("headers", {})]


def test_published_vector_is_valid() -> None:
    vectors = _github_vectors()
    assert vectors, "vectors.json has a GitHub SHA-256 vector"
    for v in vectors:
        body = v["body"].encode("utf-8")
        hub_signature.verify(body, v["headers"]["X-Hub-Signature-256"], [v["secret_or_key"]])
        assert hub_signature.sign(body, v["secret_or_key"]) == v["expected"]["signature"]


def test_docs_vector_constant_matches_sign() -> None:
    assert hub_signature.sign(BODY, SECRET) == SIGNATURE


def test_one_byte_changed_is_rejected() -> None:
    with pytest.raises(hub_signature.SignatureMismatch):
        hub_signature.verify(b"Hello, World?", SIGNATURE, [SECRET])


def test_wrong_secret_is_rejected() -> None:
    with pytest.raises(VerificationFailed):
        hub_signature.verify(BODY, SIGNATURE, ["It's a Secret to Everybody!"])


def test_missing_header_is_rejected() -> None:
    with pytest.raises(hub_signature.SignatureMissing):
        hub_signature.verify(BODY, None, [SECRET])
    with pytest.raises(hub_signature.SignatureMissing):
        hub_signature.verify(BODY, "", [SECRET])


@pytest.mark.parametrize("header", [
    "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59",
    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
    "sha256=zz7107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    "sha256 = 757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
])
def test_malformed_header_is_a_verification_failure(header: str) -> None:
    with pytest.raises(SignatureMalformed):
        hub_signature.verify(BODY, header, [SECRET])


def test_uppercase_hex_is_accepted() -> None:
    hub_signature.verify(BODY, "sha256=" + SIGNATURE.split("=", 1)[1].upper(), [SECRET])


def test_any_of_several_secrets_verifies_during_rotation() -> None:
    hub_signature.verify(BODY, SIGNATURE, ["new-secret", SECRET])
    with pytest.raises(hub_signature.SignatureMismatch):
        hub_signature.verify(BODY, SIGNATURE, ["new-secret"])


def test_no_secrets_never_verifies() -> None:
    with pytest.raises(hub_signature.SignatureMismatch):
        hub_signature.verify(BODY, SIGNATURE, [])
