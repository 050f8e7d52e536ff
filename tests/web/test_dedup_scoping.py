"""Dedup is scoped to the delivery's source, for every provider (issue 17, DESIGN.md §6.1).

Dedup keys are chosen by the sender (GitLab's ``Idempotency-Key``, Standard Webhooks'
``webhook-id``, Slack's ``event_id``, a Telegram ``update_id``...): a tenant can send any key it
likes. Two sources of two projects that receive the same key each keep their delivery; a
lookup not restricted to the source would let one tenant silence another's deliveries.
GitHub's key also carries the hook id, because a delivery GUID may repeat across hooks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from switchboard import admin
from switchboard.config import Settings
from switchboard.sources import PROVIDERS
from tests.conftest import github_headers
from tests.signers import SECRETS, request
from tests.web.multi import MultiApp, serve_all


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiApp]:
    """One live app for the whole module (each test uses its own sources): a server per test
    would cost ~3 s each for nothing this module checks."""
    settings = Settings(home=tmp_path_factory.mktemp("multi") / "instance", sweep_interval_seconds=0.5,
                        sweep_grace_seconds=1.0)
    yield from serve_all(settings)


def _delivery_id(resp_text: str) -> str:
    return re.search(r"dlv_[a-z2-7]+", resp_text).group(0)  # type: ignore[union-attr]


def _accepted(resp: object) -> str:
    """The new delivery's id; fails on a duplicate answer or an error."""
    assert resp.status_code in (200, 202), resp.text  # type: ignore[attr-defined]
    assert '"duplicate"' not in resp.text, f"treated as a duplicate: {resp.text}"  # type: ignore[attr-defined]
    return _delivery_id(resp.text)  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_same_key_at_two_sources_of_two_projects_is_two_deliveries(multi: MultiApp, provider: str) -> None:
    with multi.hub.db.write() as s:
        admin.add_project(s, f"beta-{provider}")
        other, _ = admin.add_source(s, f"beta-{provider}", provider, SECRETS[provider], queue="chat")
    multi.sources[f"other-{provider}"] = other.id
    body, headers = request(provider)  # the same bytes and headers: the same dedup key at both
    first = _accepted(multi.post(provider, body, headers))
    second = _accepted(multi.post(f"other-{provider}", body, headers))
    assert first != second
    assert multi.delivery(second).source_id == other.id
    # Each source still deduplicates its own retries.
    retry = multi.post(f"other-{provider}", body, headers)
    assert retry.status_code == 200 and retry.json() == {"delivery_id": second, "duplicate": True}
    retry = multi.post(provider, body, headers)
    assert retry.status_code == 200 and retry.json() == {"delivery_id": first, "duplicate": True}


def test_a_github_delivery_guid_repeated_by_another_hook_is_a_new_delivery(multi: MultiApp) -> None:
    # Bodies differ (identical bodies are duplicates by their digest, whatever the headers).
    body, _ = request("github", "please review acme/api#12 (hook 1)")
    body2, _ = request("github", "please review acme/api#12 (hook 2)")
    secret = SECRETS["github"]
    guid = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    first = _accepted(multi.post("github", body, github_headers(body, secret, delivery=guid, hook_id="1")))
    other_hook = _accepted(multi.post("github", body2, github_headers(body2, secret, delivery=guid, hook_id="2")))
    assert first != other_hook
    again = multi.post("github", body2, github_headers(body2, secret, delivery=guid, hook_id="2"))
    assert again.status_code == 200 and again.json() == {"delivery_id": other_hook, "duplicate": True}
