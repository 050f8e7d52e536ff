"""Every adapter offers the same :class:`~switchboard.sources.SourceAdapter` signatures (issue 16 item 3)."""

from __future__ import annotations

import hashlib
import hmac
import inspect
from datetime import UTC, datetime

import pytest

from switchboard.clock import FixedClock
from switchboard.errors import VerificationFailed
from switchboard.sources import NO_OPTIONS, PROVIDERS, SourceAdapter, SourceOptions, adapter_for


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_adapter_verifies_with_the_protocols_signature(provider: str) -> None:
    expected = [p for p in inspect.signature(SourceAdapter.verify).parameters]
    adapter = adapter_for(provider)
    params = inspect.signature(adapter.verify).parameters
    assert ["self", *params] == expected
    assert params["options"].default is NO_OPTIONS
    assert not hasattr(adapter, "verify_source")


def _sha1_only(body: bytes, secret: str) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
    return {"x-hub-signature": f"sha1={digest}", "x-github-event": "ping"}


def test_github_takes_a_sha1_only_request_only_with_the_sources_option() -> None:
    body, secret = b'{"zen": "x"}', "s" * 32
    github = adapter_for("github")
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(VerificationFailed):
        github.verify(body, _sha1_only(body, secret), [secret], clock, NO_OPTIONS)
    github.verify(body, _sha1_only(body, secret), [secret], clock, SourceOptions(allow_legacy_sha1=True))
    with pytest.raises(VerificationFailed):
        github.verify(body, _sha1_only(body, "t" * 32), [secret], clock, SourceOptions(allow_legacy_sha1=True))


def test_options_are_read_from_the_source_row() -> None:
    class Row:
        allow_legacy_sha1 = True

    assert SourceOptions.of(Row()) == SourceOptions(allow_legacy_sha1=True)
    assert SourceOptions.of(object()) == NO_OPTIONS


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_adapter_admits_with_the_signature_of_parse(provider: str) -> None:
    # The receiver calls admit() (issue 11); every adapter has it, by default parse itself.
    adapter = adapter_for(provider)
    assert list(inspect.signature(adapter.admit).parameters) == list(inspect.signature(adapter.parse).parameters)
