"""Trust on a source: who may originate work (DESIGN.md §5; mutation testing, issue 17).

Without an explicit trusted list, a linked human may originate work on a source when they own
its project or run an agent with a grant on it; owning or working on *another* project, or
another human owning this one, does not count.
"""

from __future__ import annotations

from pathlib import Path

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub
from switchboard.intake.attribution import (
    BOT_SENDER,
    UNKNOWN_SENDER,
    UNTRUSTED_SENDER,
    Attribution,
    attribute,
)
from switchboard.models import Source
from switchboard.sources import Sender


def _sender(uid: str) -> Sender:
    return Sender("github", "", uid, "someone", is_bot=False)


def test_project_owners_and_granted_agents_humans_are_trusted_nobody_else(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            for n, name in enumerate(("owner", "worker", "stranger", "other_owner")):
                admin.add_human(s, name)
                admin.link_identity(s, name, "github", str(100 + n))
            admin.add_project(s, "acme")
            admin.add_project(s, "beta")
            admin.add_owner(s, "acme", "owner")
            admin.add_owner(s, "beta", "other_owner")
            admin.add_agent(s, "w1", "worker")
            admin.grant(s, "w1", "acme", "work")
            admin.add_agent(s, "s1", "stranger")
            admin.grant(s, "s1", "beta", "work")
            source, _ = admin.add_source(s, "acme", "github", "It's a Secret to Everybody")
        with hub.db.read() as s:
            src = s.get(Source, source.id)
            verdicts = {name: attribute(s, _sender(str(100 + n)), src).reason
                        for n, name in enumerate(("owner", "worker", "stranger", "other_owner"))}
            assert attribute(s, _sender("100"), None).reason is None  # no source: no trust check
            assert attribute(s, None, src) == Attribution(None, UNKNOWN_SENDER)
            assert attribute(s, _sender("999"), src) == Attribution(None, UNKNOWN_SENDER)
            bot = Sender("github", "", "100", "owner", is_bot=True)  # linked, but a bot
            assert attribute(s, bot, src) == Attribution(None, BOT_SENDER)
        assert verdicts == {"owner": None, "worker": None, "stranger": UNTRUSTED_SENDER,
                            "other_owner": UNTRUSTED_SENDER}
    finally:
        hub.close()


def test_an_identity_matches_only_its_own_provider_and_workspace(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            admin.link_identity(s, "alice", "github", "100")
            admin.link_identity(s, "alice", "slack", "U0ALICE", "T0HOME")
        with hub.db.read() as s:
            assert attribute(s, Sender("github", "", "100", "alice", is_bot=False)).human_id is not None
            other_provider = Sender("telegram", "", "100", "alice", is_bot=False)
            assert attribute(s, other_provider) == Attribution(None, UNKNOWN_SENDER)
            assert attribute(s, Sender("slack", "T0HOME", "U0ALICE", None, is_bot=False)).human_id is not None
            other_workspace = Sender("slack", "T0OTHER", "U0ALICE", None, is_bot=False)
            assert attribute(s, other_workspace) == Attribution(None, UNKNOWN_SENDER)
    finally:
        hub.close()
