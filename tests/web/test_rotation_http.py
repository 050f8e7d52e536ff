"""A secret rotation through the real HTTP stack, for every provider (issue 17).

``source rotate-secret --keep-old-for`` leaves the old and the new secret valid together: a
delivery signed with either is accepted, and once the old one has expired only the new one
opens the source. The verifier tests check each scheme with several secrets; this checks that
every source passes all of its valid secrets to its scheme.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from switchboard import admin
from switchboard.config import Settings
from switchboard.sources import PROVIDERS
from tests import signers
from tests.signers import SECRETS, payload, sign
from tests.web.multi import MultiApp, serve_all


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiApp]:
    """One live app for the whole module (each test uses its own sources): a server per test
    would cost ~3 s each for nothing this module checks."""
    settings = Settings(home=tmp_path_factory.mktemp("multi") / "instance", sweep_interval_seconds=0.5,
                        sweep_grace_seconds=1.0)
    yield from serve_all(settings)


RFC8032_TEST2_SEED = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
RFC8032_TEST2_PUBLIC = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
NEW = {
    "github": "rotated secret 2", "gitea": "rotated-gitea-2", "forgejo": "rotated-forgejo-2",
    "gitlab": "rotated-gitlab-2", "slack": "0123456789abcdef0123456789abcdef",
    "discord": RFC8032_TEST2_PUBLIC, "teams": base64.b64encode(b"n" * 32).decode(),
    "mattermost": "n" * 26, "telegram": "rotated-tg_2", "standard_webhooks": "whsec_" + base64.b64encode(b"n" * 32).decode(),
}


def _signed(provider: str, secret: str) -> tuple[bytes, dict[str, str]]:
    """A work-making request signed (or carrying the token) ``secret``."""
    # A distinct text per request: identical bodies are duplicates by their digest.
    text = f"please review acme/api#12 ({uuid.uuid4().hex[:8]})"
    if provider == "mattermost":
        body = json.dumps(payload(provider, text, token=secret)).encode()
        return body, sign(provider, body)
    body = json.dumps(payload(provider, text)).encode()
    if provider == "discord":
        ts = signers.now()
        seed = signers.ED25519_SEED if secret == SECRETS["discord"] else RFC8032_TEST2_SEED
        return body, {"Content-Type": "application/json", "X-Signature-Timestamp": str(ts),
                      "X-Signature-Ed25519": signers.discord_ed25519(body, ts, seed)}
    return body, sign(provider, body, secret)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_old_and_new_secrets_both_open_the_source_until_the_old_one_expires(multi: MultiApp, provider: str) -> None:
    source_id = multi.sources[provider]
    with multi.hub.db.write() as s:
        admin.rotate_secret(s, source_id, multi.hub.clock.now(), timedelta(hours=1), NEW[provider])
    for secret in (SECRETS[provider], NEW[provider]):
        resp = multi.post(provider, *_signed(provider, secret))
        assert resp.status_code in (200, 202), (secret == NEW[provider], resp.text)
        assert '"duplicate"' not in resp.text
    # End the old secret now: only the new one is accepted.
    with multi.hub.db.write() as s:
        admin.rotate_secret(s, source_id, multi.hub.clock.now(), timedelta(0), NEW[provider])
    assert multi.post(provider, *_signed(provider, SECRETS[provider])).status_code == 401
    assert multi.post(provider, *_signed(provider, NEW[provider])).status_code in (200, 202)
