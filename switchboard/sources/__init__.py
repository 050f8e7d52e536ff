"""Source adapters: one module per provider (DESIGN.md §4, §6.1).

Rule: imports only ``verifiers``, ``errors``, ``clock`` and ``intake.json_shape``; no database,
no web framework. Imported by the receiver (``web``), processing (``queue.jobs``), ``intake``
and the admin operations. A new provider is a module here on :mod:`switchboard.sources.base`,
registered in :data:`PROVIDERS` and :func:`adapter_for` below.

An adapter is framework-free: it verifies raw bytes with a scheme from
:mod:`switchboard.verifiers`, parses the verified body into an :class:`Envelope`, names the
dedup key and the sender, and gives the handshake reply a provider requires. The receiver and
the processing job are thin shells around it.
"""

from __future__ import annotations

from switchboard.errors import InvalidArgument
from switchboard.sources.base import (
    NO_OPTIONS,
    SOURCE_SENDER,
    BaseSource,
    Envelope,
    Sender,
    SourceAdapter,
    SourceOptions,
)

__all__ = ["NO_OPTIONS", "PROVIDERS", "SOURCE_SENDER", "BaseSource", "Envelope", "Sender", "SourceAdapter",
           "SourceOptions", "adapter_for"]


PROVIDERS = ("github", "gitea", "forgejo", "gitlab", "slack", "discord", "teams", "mattermost", "telegram",
             "standard_webhooks")
"""Every provider a source can be configured for (``switchboard source add --provider``)."""


_ADAPTERS: dict[str, SourceAdapter] = {}
"""The adapters by provider, filled on the first call (the provider modules import this one)."""


def adapter_for(provider: str) -> SourceAdapter:
    """Return the adapter for ``provider``.

    Raises:
        InvalidArgument: unknown provider.
    """
    adapter = _ADAPTERS.get(provider)
    if adapter is not None:
        return adapter
    from switchboard.sources import (
        discord,
        gitea,
        github,
        gitlab,
        mattermost,
        slack,
        standard_webhooks,
        teams,
        telegram,
    )

    adapters: dict[str, SourceAdapter] = {
        "github": github.ADAPTER, "gitea": gitea.GITEA, "forgejo": gitea.FORGEJO, "gitlab": gitlab.ADAPTER,
        "slack": slack.ADAPTER, "discord": discord.ADAPTER, "teams": teams.ADAPTER,
        "mattermost": mattermost.ADAPTER, "telegram": telegram.ADAPTER,
        "standard_webhooks": standard_webhooks.ADAPTER,
    }
    _ADAPTERS.update(adapters)
    try:
        return adapters[provider]
    except KeyError:
        raise InvalidArgument(
            f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}"
        ) from None
