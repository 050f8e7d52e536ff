"""Kind effects of inbox decisions are installed by the hub, never imported by ``inbox.items`` (issue 16)."""

from __future__ import annotations

import pytest

from switchboard.hub import install_inbox_effects
from switchboard.inbox import effects


def test_the_hub_installs_the_permission_and_friend_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(effects, "ON_DECIDED", {})
    monkeypatch.setattr(effects, "AFTER_RESOLVED", {})
    assert not effects.installed("permission") and not effects.installed("friend")
    assert effects.installed("question") and effects.installed("approval")
    install_inbox_effects()
    assert set(effects.ON_DECIDED) == {"permission"} and set(effects.AFTER_RESOLVED) == {"friend"}
    assert effects.installed("permission") and effects.installed("friend")
