"""The vault: AES-256-GCM records bound to ref and project, the key ring, rotation."""

from __future__ import annotations

import base64
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from switchboard import admin
from switchboard.config import Settings
from switchboard.errors import ConfigError, NotFound, RateLimited, SwitchboardError
from switchboard.hub import Hub
from switchboard.intake import vault
from switchboard.intake.secrets import MintedRef, new_ref
from switchboard.mcp_server.specs import Caller
from switchboard.models import Delivery, FeedEvent, SecretRef
from tests.conftest import World, cli, cli_env

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def _store(hub: Hub, project_id: str, value: str) -> str:
    ref = new_ref()
    with hub.db.write() as s:
        vault.store(s, vault.load_key_ring(hub.settings), project_id, None, [MintedRef(ref, "github_pat", value)],
                    hub.clock.now())
    return ref


def _record(hub: Hub, ref: str) -> SecretRef:
    with hub.db.read() as s:
        row = s.get(SecretRef, ref)
        s.expunge(row)
        return row


def test_key_file_is_generated_with_mode_0600(settings: Settings) -> None:
    ring = vault.load_key_ring(settings, fresh=True)
    path = settings.home / "vault.keys"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert vault.load_key_ring(settings, fresh=True).keys == ring.keys
    assert ring.keys[ring.primary] not in repr(ring).encode() and _b(ring) not in repr(ring)


def _b(ring: vault.KeyRing) -> str:
    return base64.urlsafe_b64encode(ring.keys[ring.primary]).decode()


def test_a_record_opens_only_for_its_own_ref_and_project(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        ref = _store(hub, world.project_id, "ghp_value")
        row = _record(hub, ref)
        ring = vault.load_key_ring(world.settings)
        assert b"ghp_value" not in row.ciphertext and len(row.nonce) == 12
        assert vault.open_record(ring, row) == "ghp_value"
        for change in ({"ref": new_ref()}, {"project_id": "prj_other"}, {"version": 2},
                       {"ciphertext": row.ciphertext[:-1] + bytes([row.ciphertext[-1] ^ 1])}):
            moved = SecretRef(**{**row.model_dump(), **change})
            with pytest.raises(SwitchboardError) as info:
                vault.open_record(ring, moved)
            assert "ghp_value" not in str(info.value)
        other = _record(hub, _store(hub, world.project_id, "ghp_value"))
        assert other.nonce != row.nonce and other.ciphertext != row.ciphertext
    finally:
        hub.close()


def test_key_ring_parsing_and_errors_never_show_key_material() -> None:
    k1, k2 = _key(), _key()
    ring = vault.parse_key_ring(f"new:{k2}, old:{k1}")
    assert ring.primary == "new" and ring.ids == ["new", "old"]
    for bad in ("", "nocolon", f"bad id:{k1}", "k:" + base64.urlsafe_b64encode(b"short").decode(),
                f"k:{k1},k:{k2}", "k:!!!"):
        with pytest.raises(ValueError) as info:
            vault.parse_key_ring(bad)
        assert k1 not in str(info.value) and k2 not in str(info.value)


def test_settings_validate_vault_keys_without_echoing_them(tmp_path: Path) -> None:
    key = _key()
    s = Settings.from_env({"SWITCHBOARD_HOME": str(tmp_path), "SWITCHBOARD_VAULT_KEYS": f"k1:{key}"})
    assert s.vault_keys == f"k1:{key}" and key not in repr(s)
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"SWITCHBOARD_VAULT_KEYS": "k1:" + key[:20], "SWITCHBOARD_PORT": "x"})
    assert len(info.value.problems) == 2 and key[:20] not in str(info.value.problems)


def test_rotation_with_the_key_file_re_encrypts_and_retires_the_old_key(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        refs = [_store(hub, world.project_id, f"value-{i}") for i in range(3)]
        old = vault.load_key_ring(world.settings).primary
        done = vault.rotate(hub)
        assert done.re_encrypted == 3 and done.retired == [old] and done.primary != old
        ring = vault.load_key_ring(world.settings, fresh=True)
        assert ring.ids == [done.primary]
        assert [vault.open_record(ring, _record(hub, r)) for r in refs] == ["value-0", "value-1", "value-2"]
        with hub.db.read() as s:
            assert {r.key_id for r in s.execute(select(SecretRef)).scalars()} == {done.primary}
    finally:
        hub.close()


def test_rotation_with_env_keys_moves_records_to_the_new_primary(tmp_path: Path, world: World) -> None:
    k_old, k_new = _key(), _key()
    settings = world.settings.with_overrides(vault_keys=f"old:{k_old}")
    hub = Hub(settings, role="cli")
    try:
        ref = _store(hub, world.project_id, "v1")
    finally:
        hub.close()
    hub = Hub(settings.with_overrides(vault_keys=f"new:{k_new},old:{k_old}"), role="cli")
    try:
        done = vault.rotate(hub)
        assert (done.primary, done.re_encrypted, done.retired) == ("new", 1, ["old"])
        ring = vault.parse_key_ring(f"new:{k_new}")
        assert vault.open_record(ring, _record(hub, ref)) == "v1"
    finally:
        hub.close()


def test_vault_rotate_command(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        _store(hub, world.project_id, "v1")
    finally:
        hub.close()
    out = cli(cli_env(world.settings.home), "vault", "rotate")
    assert out["re_encrypted"] == 1 and len(out["retired"]) == 1
    assert (world.settings.home / "vault.keys").read_text().count(":") == 1


def test_delivery_bodies_are_sealed_at_rest_and_opened_on_read(world: World) -> None:
    from sqlalchemy import text

    from switchboard.models import Delivery

    hub = Hub(world.settings, role="cli")
    try:
        body = b'{"token": "plain-body-secret-123"}'
        with hub.db.write() as s:
            d = Delivery(source_id=world.source_id, project_id=world.project_id, raw_body=body)
            s.add(d)
        with hub.db.read() as s:
            stored = s.execute(text("SELECT raw_body FROM deliveries")).scalar_one()
            assert stored.startswith(vault.BODY_MAGIC) and b"plain-body-secret" not in stored
            assert s.get(Delivery, d.id).raw_body == body
        done = vault.rotate(hub)
        with hub.db.read() as s:
            stored = s.execute(text("SELECT raw_body FROM deliveries")).scalar_one()
            assert done.primary.encode() in stored[:20]
            assert s.get(Delivery, d.id).raw_body == body
    finally:
        hub.close()


def test_a_body_written_before_sealing_still_reads_and_tampering_fails() -> None:
    ring = vault.generate_key_ring()
    assert vault.open_body(ring, b'{"clear": 1}') == b'{"clear": 1}'
    sealed = vault.seal_body(ring, b"body")
    assert vault.open_body(ring, sealed) == b"body"
    with pytest.raises(SwitchboardError):
        vault.open_body(ring, sealed[:-1] + bytes([sealed[-1] ^ 1]))
    with pytest.raises(SwitchboardError):
        vault.open_body(vault.generate_key_ring(), sealed)


def test_writing_a_body_without_a_key_ring_fails_closed(world: World) -> None:
    from switchboard.db import Database
    from switchboard.models import Delivery

    db = Database(world.settings)  # no Hub: nothing attached the ring
    try:
        with pytest.raises(Exception, match="without the vault key ring"):  # wrapped by SQLAlchemy
            with db.write() as s:
                s.add(Delivery(source_id=world.source_id, project_id=world.project_id, raw_body=b"x"))
    finally:
        db.dispose()


def test_processes_starting_at_once_share_one_key_ring(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Several processes creating the key file at the same moment end with one ring."""
    import multiprocessing as mp

    from switchboard.config import Settings
    from switchboard.intake import vault as vault_mod

    ctx = mp.get_context("spawn")
    settings = Settings(home=tmp_path)
    with ctx.Pool(6) as pool:
        primaries = pool.map(_primary_of, [settings] * 6)
    assert len(set(primaries)) == 1
    assert vault_mod.load_key_ring(settings, fresh=True).primary == primaries[0]


def _primary_of(settings) -> str:  # type: ignore[no-untyped-def]
    from switchboard.intake import vault as vault_mod

    return vault_mod.load_key_ring(settings).primary


# -- found by mutation testing (issue 17) ------------------------------------------------------------


def test_the_fetch_limit_is_per_agent_over_a_sliding_window() -> None:
    assert (vault.FetchLimiter().limit, vault.FetchLimiter().window) == (30, 60.0)
    limiter = vault.FetchLimiter(limit=2, window=60)
    limiter.check("a", 0.0)
    limiter.check("a", 30.0)
    with pytest.raises(RateLimited) as info:
        limiter.check("a", 59.9)
    assert info.value.args[0] == "at most 2 secret fetches per 60 s; retry later"
    limiter.check("b", 59.9)  # another agent has its own window
    limiter.check("a", 60.0)  # the first call left the window exactly 60 s later
    with pytest.raises(RateLimited):
        limiter.check("a", 60.0)


def test_a_fetch_returns_the_value_to_a_worker_and_records_who_fetched_what(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        ref = _store(hub, world.project_id, "ghp_value")
        caller = Caller(world.agent_id, "claude1", "hum_x")
        result = vault.fetch_tool(hub, caller, {"ref": ref})
        assert result == {"ref": ref, "value": "ghp_value"}
        assert vault.render_fetch(result) == f"secret {ref}: ghp_value"
        with hub.db.read() as s:
            (event,) = s.execute(select(FeedEvent).where(FeedEvent.kind == "secret.fetched")).scalars()
        assert (event.project_id, event.subject_id, event.title, event.data) == (
            world.project_id, ref, f"Secret {ref} (github_pat) fetched by agent claude1",
            {"ref": ref, "kind": "github_pat", "agent_id": world.agent_id, "agent": "claude1"})
        with hub.db.write() as s:
            admin.add_agent(s, "reader", "alice")
            admin.grant(s, "reader", "acme", "read")
            reader = admin.agent_by_name(s, "reader").id
            stranger = admin.add_agent(s, "stranger", "alice").id
        for who, asked in ((caller, "sec_" + "A" * 32), (caller, ref[:-1]), (Caller(reader, "reader", "hum_x"), ref),
                           (Caller(stranger, "stranger", "hum_x"), ref)):
            with pytest.raises(NotFound) as info:
                vault.fetch_tool(hub, who, {"ref": asked})
            assert info.value.args[0] == "no such secret ref"
    finally:
        hub.close()


def test_storing_keeps_existing_refs_and_cuts_the_kind(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        ring = vault.load_key_ring(hub.settings)
        ref = new_ref()
        with hub.db.write() as s:
            delivery = Delivery(source_id=world.source_id, project_id=world.project_id)
            s.add(delivery)
            s.flush()
            assert vault.store(s, ring, world.project_id, delivery.id, [MintedRef(ref, "k" * 70, "first")],
                               T0) == 1
        with hub.db.write() as s:
            assert vault.store(s, ring, world.project_id, None, [MintedRef(ref, "other", "second"),
                                                                  MintedRef(new_ref(), "other", "third"),
                                                                  MintedRef(new_ref(), "other", "fourth")],
                               hub.clock.now()) == 2
        row = _record(hub, ref)
        assert (row.kind, row.version, vault.open_record(ring, row)) == ("k" * 60, 1, "first")
        assert (row.delivery_id, row.created_at.replace(tzinfo=UTC)) == (delivery.id, T0)
    finally:
        hub.close()


def _ring(kid: str = "k1") -> vault.KeyRing:
    return vault.KeyRing({kid: bytes(range(32))}, kid)


def test_a_record_sealed_under_a_missing_or_another_key_fails_with_its_ref_only(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        row = _record(hub, _store(hub, world.project_id, "ghp_value"))
    finally:
        hub.close()
    with pytest.raises(SwitchboardError) as info:
        vault.open_record(_ring("gone"), row)
    assert info.value.args[0] == "the vault key for this secret is not configured"
    with pytest.raises(SwitchboardError) as info:
        vault.open_record(vault.KeyRing({row.key_id: bytes(32)}, row.key_id), row)
    assert info.value.args[0] == "the secret could not be decrypted"
    assert [r.getMessage() for r in caplog.records if r.name == "switchboard.sealing.records"] == [
        f"secret {row.ref} is sealed under key {row.key_id}, which is not in the vault key ring",
        f"secret {row.ref} failed authentication (tampered or moved)"]


@pytest.mark.parametrize("kid", ["k", "k" * 40])
def test_a_sealed_body_names_its_key_and_opens_whatever_the_key_id_length(kid: str) -> None:
    ring = _ring(kid)
    sealed = vault.seal_body(ring, b"body")
    magic = len(vault.BODY_MAGIC)
    assert sealed[:magic] == vault.BODY_MAGIC == b"\x00SBV1"
    assert (sealed[magic], sealed[magic + 1:magic + 1 + len(kid)]) == (len(kid), kid.encode())
    assert len(sealed) == magic + 1 + len(kid) + 12 + len(b"body") + 16
    assert vault.open_body(ring, sealed) == b"body"
    assert vault.open_body(vault.KeyRing({"other": bytes(32), **ring.keys}, "other"), sealed) == b"body"


def test_a_sealed_body_without_its_key_or_ring_or_tampered_fails_with_a_reason() -> None:
    sealed = vault.seal_body(_ring(), b"body")
    for ring, stored, reason in (
            (None, sealed, "a sealed delivery body was read without the vault key ring"),
            (_ring("k2"), sealed, "the vault key for this delivery body is not configured"),
            (_ring(), sealed[:-1] + bytes([sealed[-1] ^ 1]), "the delivery body could not be decrypted"),
            (vault.KeyRing({"k1": bytes(32)}, "k1"), sealed, "the delivery body could not be decrypted")):
        with pytest.raises(SwitchboardError) as info:
            vault.open_body(ring, stored)
        assert info.value.args[0] == reason
    assert vault.open_body(None, b"clear") == b"clear"
    with pytest.raises(SwitchboardError) as info:  # a key id that is not ASCII: no such key
        vault.open_body(_ring(), vault.BODY_MAGIC + b"\x02\xff\xfe" + bytes(12 + 20))
    assert info.value.args[0] == "the vault key for this delivery body is not configured"


def test_the_sealed_column_types_seal_on_write_open_on_read_and_refuse_without_a_ring() -> None:
    from types import SimpleNamespace

    from switchboard.sealing.columns import dialect_ring
    from switchboard.sealing.text import PREFIX, SealedText, open_text

    ring = _ring()
    with_ring = SimpleNamespace(switchboard_vault_ring=ring)
    lazy = SimpleNamespace(switchboard_vault_ring=lambda: ring)
    bare = SimpleNamespace()
    assert dialect_ring(with_ring) is ring and dialect_ring(lazy) is ring and dialect_ring(bare) is None
    body_type, text_type = vault.SealedBytes(), SealedText()
    stored = body_type.process_bind_param(b"body", lazy)
    assert stored is not None and vault.open_body(ring, stored) == b"body"
    assert body_type.process_result_value(stored, with_ring) == b"body"
    assert body_type.process_bind_param(None, bare) is None and body_type.process_result_value(None, bare) is None
    secret = text_type.process_bind_param("s3cret", with_ring)
    assert secret is not None and secret.startswith(PREFIX) and open_text(ring, secret) == "s3cret"
    assert text_type.process_bind_param(secret, bare) == secret  # sealed already: kept as it is
    assert text_type.process_result_value(secret, lazy) == "s3cret"
    assert text_type.process_bind_param(None, bare) is None and text_type.process_result_value(None, bare) is None
    for kind, value, reason in ((body_type, b"x", "refusing to store a delivery body without the vault key ring"),
                                (text_type, "x", "refusing to store a source secret without the vault key ring")):
        with pytest.raises(SwitchboardError) as info:
            kind.process_bind_param(value, bare)
        assert info.value.args[0] == reason


@pytest.mark.parametrize("kid", ["k", "k" * 40])
def test_a_sealed_source_secret_names_its_key_and_opens_whatever_the_key_id_length(kid: str) -> None:
    from switchboard.sealing.text import PREFIX, key_id_of, open_text, seal_text

    ring = _ring(kid)
    stored = seal_text(ring, "s3cret é")
    raw = base64.urlsafe_b64decode(stored[len(PREFIX):])
    assert stored.startswith("sbv1:") and (raw[0], raw[1:1 + len(kid)]) == (len(kid), kid.encode())
    assert len(raw) == 1 + len(kid) + 12 + len("s3cret é".encode()) + 16
    assert key_id_of(stored) == kid and key_id_of("clear") is None
    assert key_id_of(PREFIX + base64.urlsafe_b64encode(b"\x02\xff\xfe").decode()) == "\ufffd\ufffd"
    assert open_text(ring, stored) == "s3cret é" and open_text(None, "clear") == "clear"
    for ring_, value, reason in (
            (None, stored, "a sealed source secret was read without the vault key ring"),
            (_ring("other"), stored, "the vault key for this source secret is not configured"),
            (vault.KeyRing({kid: bytes(32)}, kid), stored, "a source secret could not be decrypted"),
            (ring, "sbv1:!!", "a source secret could not be decrypted"),
            (ring, "sbv1:", "a source secret could not be decrypted")):
        with pytest.raises(SwitchboardError) as info:
            open_text(ring_, value)
        assert info.value.args[0] == reason


def test_key_ring_errors_name_the_entry_and_the_id() -> None:
    k = base64.urlsafe_b64encode(bytes(32)).decode()
    short = base64.urlsafe_b64encode(bytes(16)).decode().rstrip("=")
    for text, reason in (
            ("", "no keys given"), (" , ", "no keys given"),
            (f"a:{k},nocolon", "entry 2 must be <id>:<key> with an id of [A-Za-z0-9_-]{1,40}"),
            (f"{'k' * 41}:{k}", "entry 1 must be <id>:<key> with an id of [A-Za-z0-9_-]{1,40}"),
            ("k1:a", "key 'k1' is not url-safe base64"),
            (f"k1:{short}", "key 'k1' must be 32 bytes, got 16"),
            ("k1:" + "A" * 35, "key 'k1' must be 32 bytes, got 26"),  # unpadded: padded before decoding
            (f"k1:{k},k1:{k}", "key id 'k1' appears twice")):
        with pytest.raises(ValueError) as info:
            vault.parse_key_ring(text)
        assert info.value.args[0] == reason, text
    ring = vault.parse_key_ring(f" a:{k} ,, b:{k.rstrip('=')}")
    assert (ring.primary, ring.ids, ring.keys["b"]) == ("a", ["a", "b"], bytes(32))
    assert ring.serialise() == f"a:{k},b:{k}" and vault.parse_key_ring(ring.serialise()) == ring


def test_new_key_ids_and_rings_are_random_and_well_formed(tmp_path: Path) -> None:
    import re

    ids = {vault.new_key_id() for _ in range(20)}
    assert len(ids) == 20 and all(re.fullmatch(r"k[0-9a-f]{8}", i) for i in ids)
    ring = vault.generate_key_ring()
    assert list(ring.keys) == [ring.primary] and len(ring.keys[ring.primary]) == 32
    assert vault.generate_key_ring().keys != ring.keys
    assert vault.key_file(Settings(home=tmp_path)) == tmp_path / "vault.keys"
    path = tmp_path / "sub" / "dir" / "vault.keys"
    vault.write_key_file(path, ring)
    assert path.read_text() == ring.serialise() + "\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["vault.keys"]


def test_the_key_file_is_created_once_kept_per_process_and_reread_when_it_changes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from switchboard.sealing.keys import _create_key_file

    caplog.set_level("WARNING", logger="switchboard.sealing.keys")
    settings = Settings(home=tmp_path / "a")
    path = settings.home / "vault.keys"
    ring = vault.load_key_ring(settings)
    assert vault.load_key_ring(settings) is ring and vault.parse_key_ring(path.read_text()) == ring
    other = vault.generate_key_ring()
    vault.write_key_file(path, other)
    os.utime(path, ns=(1, 1))  # another process rotated: a different mtime
    assert vault.load_key_ring(settings) == other
    assert vault.load_key_ring(settings, fresh=True) == other
    path.chmod(0o644)
    vault.load_key_ring(settings, fresh=True)
    path.write_text(" , ")
    with pytest.raises(ConfigError) as info:
        vault.load_key_ring(settings, fresh=True)
    assert info.value.problems == [f"vault key file {path}: no keys given"]
    shared = Settings(home=tmp_path / "b", database_url="postgresql://db.example/x")
    vault.load_key_ring(shared)
    assert [r.getMessage() for r in caplog.records] == [
        f"generated a vault key ring in {path} (mode 0600); back it up",
        f"vault key file {path} is readable by group or others; chmod 600 it",
        f"vault key file {path} is readable by group or others; chmod 600 it",  # and when it is malformed
        ("SWITCHBOARD_VAULT_KEYS is unset with a shared database: every process on every host must use the same "
         f"{shared.home / 'vault.keys'}, or set the same SWITCHBOARD_VAULT_KEYS everywhere"),
        f"generated a vault key ring in {shared.home / 'vault.keys'} (mode 0600); back it up"]
    created = tmp_path / "c" / "d" / "vault.keys"
    assert _create_key_file(created, ring) is True and _create_key_file(created, other) is False
    assert created.read_text() == ring.serialise() + "\n" and stat.S_IMODE(created.stat().st_mode) == 0o600
    assert [p.name for p in created.parent.iterdir()] == ["vault.keys"]
    env = Settings(home=tmp_path / "d", vault_keys=other.serialise())
    assert vault.load_key_ring(env) == other and not (tmp_path / "d" / "vault.keys").exists()


def test_rotation_reports_what_no_key_opens_and_skips_what_the_primary_sealed(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    from switchboard.models import Delivery, SourceSecret

    f = vault.load_key_ring(world.settings)  # the file ring the world's source secret is sealed with
    k_file, k_gone, k_new = (base64.urlsafe_b64encode(k).decode() for k in (f.keys[f.primary], os.urandom(32),
                                                                             os.urandom(32)))
    ids: dict[str, str] = {}

    def under(keys: str) -> Hub:
        return Hub(world.settings.with_overrides(vault_keys=keys), role="cli")

    # Stored primary first, then two that no key opens, then one to re-encrypt: each is skipped
    # and the pass goes on.
    for name, keys in (("new", f"new:{k_new},{f.primary}:{k_file}"), ("gone", f"gone:{k_gone},{f.primary}:{k_file}"),
                       ("gone2", f"gone:{k_gone},{f.primary}:{k_file}"), ("old", f"{f.primary}:{k_file}")):
        hub = under(keys)
        try:
            ids[f"ref_{name}"] = _store(hub, world.project_id, f"value-{name}")
            with hub.db.write() as s:
                d = Delivery(source_id=world.source_id, project_id=world.project_id, raw_body=name.encode())
                s.add(d)
                s.flush()
                ids[f"body_{name}"] = d.id
            if name in ("new", "gone", "old"):  # source secrets: under the primary, a lost key, the old key
                with hub.db.write() as s:
                    admin.add_project(s, f"p-{name}")
                    source, _ = admin.add_source(s, f"p-{name}", "github", f"a secret sealed under {name}")
                    ids[f"secret_{name}"] = s.execute(select(SourceSecret.id).where(
                        SourceSecret.source_id == source.id)).scalar_one()
        finally:
            hub.close()
    hub = under(f"new:{k_new},{f.primary}:{k_file}")
    try:
        done = vault.rotate(hub)
        assert done == vault.Rotation("new", 1, [f.primary], sorted([ids["ref_gone"], ids["ref_gone2"],
                                                                     ids["body_gone"], ids["body_gone2"],
                                                                     ids["secret_gone"]]), 2)
        old, new = _record(hub, ids["ref_old"]), _record(hub, ids["ref_new"])
        assert (old.key_id, old.version, new.key_id, new.rotated_at) == ("new", 1, "new", None)
        assert old.rotated_at is not None
        ring = vault.parse_key_ring(f"new:{k_new}")
        assert vault.open_record(ring, old) == "value-old"
        with hub.db.read() as s:
            assert s.get(Delivery, ids["body_old"]).raw_body == b"old"
    finally:
        hub.close()
    assert [r.getMessage() for r in caplog.records if r.name == "switchboard.intake.vault"] == [
        "vault rotate: 5 records or bodies are sealed under keys no longer in the ring; they were left as they are"]


def test_rotation_reads_the_key_file_afresh(world: World) -> None:
    """A key another process added within the same file timestamp is still retired."""
    path = world.settings.home / "vault.keys"
    ring = vault.load_key_ring(world.settings)
    stamp = path.stat().st_mtime_ns
    vault.write_key_file(path, vault.KeyRing({**ring.keys, "added": bytes(32)}, ring.primary))
    os.utime(path, ns=(stamp, stamp))
    hub = Hub(world.settings, role="cli")
    try:
        assert vault.rotate(hub).retired == [ring.primary, "added"]
    finally:
        hub.close()


def test_each_agent_has_its_own_fetch_limit(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vault, "LIMITER", vault.FetchLimiter(limit=1, window=60))
    hub = Hub(world.settings, role="cli")
    try:
        ref = _store(hub, world.project_id, "ghp_value")
        with hub.db.write() as s:
            other = admin.add_agent(s, "claude2", "alice").id
            admin.grant(s, "claude2", "acme", "work")
        assert vault.fetch_tool(hub, Caller(world.agent_id, "claude1", "hum_x"), {"ref": ref})["value"] == "ghp_value"
        assert vault.fetch_tool(hub, Caller(other, "claude2", "hum_x"), {"ref": ref})["value"] == "ghp_value"
        with pytest.raises(RateLimited):
            vault.fetch_tool(hub, Caller(world.agent_id, "claude1", "hum_x"), {"ref": ref})
    finally:
        hub.close()


def test_a_value_with_a_lone_surrogate_is_sealed_and_opened_as_it_was(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        row = _record(hub, _store(hub, world.project_id, "half \ud800 a pair"))
        assert vault.open_record(vault.load_key_ring(world.settings), row) == "half \ud800 a pair"
    finally:
        hub.close()


def test_each_home_keeps_its_own_key_ring_even_when_the_files_share_a_timestamp(tmp_path: Path) -> None:
    a, b = Settings(home=tmp_path / "a"), Settings(home=tmp_path / "b")
    ring_a, ring_b = vault.generate_key_ring(), vault.generate_key_ring()
    for settings, ring in ((a, ring_a), (b, ring_b)):
        vault.write_key_file(settings.home / "vault.keys", ring)
        os.utime(settings.home / "vault.keys", ns=(10**18, 10**18))
    assert vault.load_key_ring(a) == ring_a and vault.load_key_ring(b) == ring_b
