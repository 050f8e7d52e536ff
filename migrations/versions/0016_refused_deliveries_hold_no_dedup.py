"""deliveries refused 400 at receipt hold no dedup key or body digest (issue 11 review)

A delivery whose body failed to parse is recorded (``status = 'failed'``, never processed)
and answered 400. It kept its dedup key and body digest, so the same bytes sent again (a
provider's redelivery) matched it and were answered 200 ``duplicate``, as if the first had
been accepted. The receiver no longer sets them on such rows; this clears them on the rows
already recorded. Deliveries that were acknowledged and failed later in processing
(``processed_at`` set) keep theirs: their redelivery is a duplicate.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 09:10:00
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE deliveries SET dedup_key = NULL, body_digest = NULL "
        "WHERE status = 'failed' AND processed_at IS NULL AND raw_body IS NULL "
        "AND error_code = 'malformed_payload'"
    )


def downgrade() -> None:
    pass  # the cleared keys are not recoverable, and nothing needs them
