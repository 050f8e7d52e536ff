"""Shared-token schemes: the request carries the secret itself (no signature over the body).

Used by GitLab (``X-Gitlab-Token``, https://docs.gitlab.com/user/project/integrations/webhooks/),
Telegram (``X-Telegram-Bot-Api-Secret-Token``, https://core.telegram.org/bots/api#setwebhook)
and Mattermost outgoing webhooks (the ``token`` body field,
https://developers.mattermost.com/integrate/webhooks/outgoing/). The comparison is constant
time against every valid secret; the token never appears in an error or a log line.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from switchboard.verifiers import SignatureMismatch, SignatureMissing


def verify(given: str | None, secrets: Sequence[str]) -> None:
    """Check a presented token against every valid secret in constant time.

    Both sides are hashed first so the comparison does not leak the secret's length.

    Args:
        given: the presented token, ``None`` when absent.
        secrets: the source's currently valid tokens.

    Raises:
        SignatureMissing: no token presented.
        SignatureMismatch: the token matches no secret.
    """
    if given is None or given == "":
        raise SignatureMissing()
    digest = hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest()
    ok = False
    for secret in secrets:
        if not secret:
            continue
        ok |= hmac.compare_digest(hashlib.sha256(secret.encode("utf-8")).digest(), digest)
    if not ok:
        raise SignatureMismatch()
