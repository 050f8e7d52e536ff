"""Ids (DESIGN.md §1): a prefix, ``_``, random bytes in lower-case base32."""

from __future__ import annotations

import pytest


def test_new_id_is_lower_case_base32_of_its_random_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 11: the 10-byte ids (per delivery, per todo) skip base64.b32encode; the same text.
    import base64
    import os

    from switchboard.models import base

    for raw in [bytes(10), b"\xff" * 10, bytes(range(10)), *(os.urandom(10) for _ in range(2000)),
                os.urandom(16), os.urandom(5)]:
        monkeypatch.setattr(base.os, "urandom", lambda n, raw=raw: raw[:n])
        assert base.new_id("dlv", len(raw)) == "dlv_" + base64.b32encode(raw).decode().rstrip("=").lower()
