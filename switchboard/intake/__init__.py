"""Intake: attribution, quarantine, the channel-break check, secrets (DESIGN.md §5).

Rule: imports ``models``, ``sources`` (envelopes), ``sealing``, ``feed``, ``admin``; no web
framework. Imported by ``queue.jobs`` (screening, attribution, vault), ``web``, ``cli``,
``mcp_server``. The screening steps are composed in :mod:`switchboard.intake.screening`.
"""