"""Gitea and Forgejo: bare hex HMAC-SHA256 of the raw body in ``X-Gitea-Signature`` /
``X-Forgejo-Signature`` (no ``sha256=`` prefix), keyed with the webhook secret as UTF-8.

Sources: https://docs.gitea.com/usage/webhooks and https://forgejo.org/docs/latest/user/webhooks/
(Forgejo sends both headers with the same value; Gitea also sends GitHub-style headers, which
a Gitea source ignores: the scheme is chosen by the source's provider, never by sniffing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from switchboard.verifiers import SignatureMalformed, SignatureMissing
from switchboard.verifiers.hub_signature import verify_hex

HEADERS = ("x-forgejo-signature", "x-gitea-signature")
_HEX = re.compile(r"[0-9a-fA-F]{64}")


def verify(body: bytes, headers: Mapping[str, str], secrets: Sequence[str | bytes]) -> None:
    """Verify every Gitea/Forgejo signature header present; at least one must be.

    Args:
        body: the exact request bytes.
        headers: request headers with lower-case names.
        secrets: the source's currently valid secrets.

    Raises:
        SignatureMissing: neither header is present.
        SignatureMalformed: a header is not 64 hex digits.
        SignatureMismatch: a present header matches no secret.
    """
    present = [headers[name].strip() for name in HEADERS if headers.get(name, "") != ""]
    if not present:
        raise SignatureMissing()
    for value in present:
        if not _HEX.fullmatch(value):
            raise SignatureMalformed("X-Gitea-Signature / X-Forgejo-Signature must be 64 hex digits")
        verify_hex(body, value, secrets)
