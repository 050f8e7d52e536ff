"""Which verified, attributed deliveries become todos: the source's ``todo_events`` choice.

A delivery whose adapter gave it a title becomes a todo when its kind matches the source's
list; every other delivery becomes a feed event only. The user decides per source
(``switchboard source add/set --todo-events``); a source without a list uses its provider's
default, which is what Switchboard made todos of before the setting existed.

An entry matches a kind (``Envelope.kind``, as ``delivery list`` and feed events show it) when
it is the kind itself or a prefix ending at a dot: ``issues`` matches ``issues.opened``;
``event_callback.app_mention`` matches only Slack mentions; ``event_callback`` every Slack
event.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from switchboard.errors import InvalidArgument
from switchboard.sources.base import Envelope

_GITHUB_LIKE = ("issues", "issue_comment", "pull_request", "pull_request_review", "push", "workflow_run",
                "check_run", "release", "discussion")
DEFAULT_TODO_EVENTS: dict[str, tuple[str, ...]] = {
    "github": _GITHUB_LIKE,
    "gitea": _GITHUB_LIKE + ("pull_request_approved", "pull_request_rejected", "pull_request_comment",
                             "pull_request_review_approved", "pull_request_review_rejected",
                             "pull_request_review_comment"),
    "gitlab": ("issue", "work_item", "merge_request", "note", "push"),
    "slack": ("event_callback.app_mention", "event_callback.message", "slash_command", "interaction.block_actions",
              "interaction.view_submission", "interaction.shortcut", "interaction.message_action"),
    "discord": ("interaction.application_command", "interaction.message_component", "interaction.modal_submit"),
    "teams": ("activity.message",),
    "mattermost": ("message",),
    "telegram": ("update.message", "update.edited_message", "update.business_message", "update.callback_query"),
    "standard_webhooks": ("webhook",),
}
DEFAULT_TODO_EVENTS["forgejo"] = DEFAULT_TODO_EVENTS["gitea"]
"""Today's list per provider (the events that became todos before ``todo_events`` existed).
GitHub review comments, discussion comments and commit comments are titled but not listed:
feed events unless a source asks for them."""

KNOWN_KINDS: dict[str, frozenset[str]] = {"github": frozenset({
    "branch_protection_rule", "check_run", "check_suite", "code_scanning_alert", "commit_comment", "create",
    "delete", "dependabot_alert", "deploy_key", "deployment", "deployment_status", "discussion",
    "discussion_comment", "fork", "gollum", "installation", "issue_comment", "issues", "label", "member",
    "membership", "merge_group", "meta", "milestone", "organization", "package", "page_build", "ping", "project",
    "project_card", "project_column", "projects_v2", "projects_v2_item", "public", "pull_request",
    "pull_request_review", "pull_request_review_comment", "pull_request_review_thread", "push", "registry_package",
    "release", "repository", "repository_dispatch", "secret_scanning_alert", "security_advisory", "sponsorship",
    "star", "status", "team", "team_add", "watch", "workflow_dispatch", "workflow_job", "workflow_run"})}
"""Event names beyond the defaults, per provider (GitHub: docs.github.com "Webhook events and
payloads"), so :func:`unfamiliar` flags typos and not real events."""

MAX_ENTRIES = 100
_ENTRY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/ -]{0,99}")


def default_for(provider: str) -> tuple[str, ...]:
    """The provider's default list (empty for an unknown provider)."""
    return DEFAULT_TODO_EVENTS.get(provider, ())


def effective(provider: str, todo_events: Sequence[str] | None) -> list[str]:
    """The list in force for a source: its own, else the provider's default."""
    return list(todo_events) if todo_events is not None else list(default_for(provider))


def matches(entries: Iterable[str], kind: str) -> bool:
    """True when an entry is ``kind`` or a dot-ended prefix of it (see the module docstring)."""
    return any(kind == e or kind.startswith(e + ".") for e in entries)


def wants_todo(provider: str, todo_events: Sequence[str] | None, envelope: Envelope) -> bool:
    """Whether a verified, attributed delivery becomes a todo (else a feed event only).

    Args:
        provider: the source's provider.
        todo_events: the source's list, ``None`` for the provider's default.
        envelope: the parsed delivery; one without a title is never a todo.
    """
    return envelope.title is not None and matches(effective(provider, todo_events), envelope.kind)


def unfamiliar(provider: str, entries: Sequence[str] | None) -> list[str]:
    """Entries whose first segment is none of the provider's default kinds: maybe a typo.

    Not an error (a provider has more kinds than its defaults: GitHub's ``star``, ``fork``...);
    the CLI prints them with a note, so ``issuez`` does not silently stop every todo.
    """
    known = {e.split(".")[0] for e in default_for(provider)} | KNOWN_KINDS.get(provider, frozenset())
    return [e for e in entries or () if known and e.split(".")[0] not in known]


def parse_todo_events(provider: str, value: str) -> list[str] | None:
    """Parse ``--todo-events``: comma-separated kinds; ``default`` for the provider's list
    (stored as ``None``); ``none`` (or an empty value) for no todos at all.

    Raises:
        InvalidArgument: an entry that is not a kind (letters, digits, ``_ . : / -`` and
            spaces, 1-100 characters, starting with a letter, digit or ``_``), or too many.
    """
    text = value.strip()
    if text.lower() == "default":
        return None
    if text == "" or text.lower() == "none":
        return []
    entries: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not _ENTRY.fullmatch(entry):
            # Worded for the CLI flag and the web UI's field alike (it named the flag on the web page).
            raise InvalidArgument("todo events are comma-separated event kinds such as 'issues', "
                                  "'issues.opened' or 'event_callback.app_mention' (or 'default', 'none')")
        if entry not in entries:
            entries.append(entry)
    if len(entries) > MAX_ENTRIES:
        raise InvalidArgument(f"todo events: at most {MAX_ENTRIES} kinds")
    return entries
