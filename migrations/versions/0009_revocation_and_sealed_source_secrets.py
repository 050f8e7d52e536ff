"""agent removal, and source secrets sealed with the vault in place

Revision ID: 0009
Revises: 0011
Create Date: 2026-12-01 01:30:00

``agents.removed_at`` records ``switchboard agent remove``. Every clear ``source_secrets.secret``
is sealed with the vault key ring (issue 13 item 5) when the settings are at hand (``switchboard
init``/``serve`` pass them); run through the bare ``alembic`` command, the values stay clear
until ``switchboard vault rotate`` (which seals every one) or the next ``switchboard init``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models.base

revision = '0009'
down_revision = '0011'
branch_labels = None
depends_on = None


def seal_clear_secrets(connection: sa.engine.Connection, settings: object) -> int:
    """Seal every source secret still stored in clear; returns how many."""
    from switchboard.sealing.keys import load_key_ring
    from switchboard.sealing.text import PREFIX, seal_text

    ring = load_key_ring(settings)  # type: ignore[arg-type]
    table = sa.table("source_secrets", sa.column("id", sa.String), sa.column("secret", sa.Text))
    rows = connection.execute(sa.select(table.c.id, table.c.secret)).all()
    count = 0
    for sid, value in rows:
        if value is not None and not value.startswith(PREFIX):
            connection.execute(table.update().where(table.c.id == sid).values(secret=seal_text(ring, value)))
            count += 1
    return count


def upgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('removed_at', switchboard.models.base.UTCDateTime(), nullable=True))
    settings = op.get_context().config.attributes.get("settings") if op.get_context().config else None
    if settings is not None:
        seal_clear_secrets(op.get_bind(), settings)


def downgrade() -> None:
    # Sealed secrets stay sealed (the models read both forms).
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_column('removed_at')
