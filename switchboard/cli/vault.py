"""``switchboard vault``: the key ring of the secret vault."""

from __future__ import annotations

from typing import Any

from switchboard.cli.base import admin, main, open_hub


@main.group()
def vault() -> None:
    """The vault: secret values behind refs, AES-256-GCM encrypted (key ring: SWITCHBOARD_VAULT_KEYS)."""


@vault.command("rotate")
@admin
def vault_rotate() -> tuple[dict[str, Any], str]:
    """Re-encrypt every secret under a new primary key and retire the old ones.

    With SWITCHBOARD_VAULT_KEYS unset, a new key is generated in the instance folder. With it
    set, put the new key first, run this, then remove the retired ids it prints.
    """
    from switchboard.intake import vault as vault_mod

    hub = open_hub()
    try:
        done = vault_mod.rotate(hub)
    finally:
        hub.close()
    retired = ", ".join(done.retired) or "none"
    hint = (" (remove them from SWITCHBOARD_VAULT_KEYS)" if hub.settings.vault_keys and done.retired else "")
    lost = (f"; {len(done.unreadable)} records are sealed under keys no longer in the ring and were left "
            "as they are (restore the old key to SWITCHBOARD_VAULT_KEYS or vault.keys to read them)"
            if done.unreadable else "")
    return ({"primary": done.primary, "re_encrypted": done.re_encrypted, "retired": done.retired,
             "unreadable": done.unreadable},
            f"primary key {done.primary}; {done.re_encrypted} secrets re-encrypted; retired: {retired}{hint}{lost}")
