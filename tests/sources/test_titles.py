"""Issue 12 #6: every title builder with empty, null and missing fields.

Each work payload of every provider (GitHub's twelve real payloads included) is parsed again
with each field, one at a time, set to ``""``, set to ``null`` and removed. Whenever a title
comes out it must be one readable line: not empty, no ``""``, no ``None``, no ``#None``, no
dangling colon, no doubled spaces.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from switchboard.errors import InvalidArgument
from switchboard.sources import PROVIDERS, adapter_for
from switchboard.sources.github import title_for
from tests.conftest import CASES
from tests.signers import payload

_BAD = re.compile(r'""|\bNone\b|#None|#\s|!\s|:\s*$|\s{2}|^\s|\s$|\(\)|/\s*$')
_MISSING = object()

GITLAB = {
    "push": {"object_kind": "push", "ref": "refs/heads/main", "before": "a" * 40, "after": "b" * 40,
             "user_id": 4, "user_username": "gl", "total_commits_count": 1,
             "project": {"path_with_namespace": "acme/api", "web_url": "https://gitlab.com/acme/api"}},
    "tag_push": {"object_kind": "tag_push", "ref": "refs/tags/v1.2", "before": "0" * 40, "after": "c" * 40,
                 "user_id": 4, "total_commits_count": 0, "project": {"path_with_namespace": "acme/api"}},
    "note": {"object_kind": "note", "user": {"id": 4, "username": "gl"}, "project": {"path_with_namespace": "acme/api"},
             "object_attributes": {"note": "LGTM", "noteable_type": "MergeRequest"},
             "merge_request": {"iid": 3}},
    "merge_request": {"object_kind": "merge_request", "user": {"id": 4}, "project": {"path_with_namespace": "a/b"},
                      "object_attributes": {"iid": 3, "title": "Fix", "action": "open"}},
}
DISCORD_EXTRA = [
    {"type": 3, "data": {"custom_id": "approve", "component_type": 2}},
    {"type": 3, "data": {"custom_id": "pick", "component_type": 3, "values": ["a", "b"]}},
    {"type": 5, "data": {"custom_id": "form"}},
]
SLACK_EXTRA = [
    {"type": "block_actions", "user": {"id": "U1", "team_id": "T1"}, "actions": [{"text": {"text": "OK"}}]},
    {"type": "view_submission", "user": {"id": "U1"}, "view": {"callback_id": "cb"}},
]


def _leaves(value: Any, path: tuple[Any, ...] = (), depth: int = 4) -> Iterator[tuple[Any, ...]]:
    if depth == 0:
        return
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*path, key)
        yield from _leaves(child, (*path, key), depth - 1)


def _variants(p: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "as is", p
    for path in _leaves(p):
        for replacement in ("", None, _MISSING):
            q = copy.deepcopy(p)
            target = q
            for key in path[:-1]:
                target = target[key]
            if replacement is _MISSING:
                if isinstance(target, dict):
                    del target[path[-1]]
                else:
                    continue
            else:
                target[path[-1]] = replacement
            yield f"{'.'.join(map(str, path))}={replacement!r}", q


def _check(title: str | None, where: str) -> None:
    if title is None:
        return
    assert title and not _BAD.search(title), (where, title)


def _github_cases() -> list[tuple[str, dict[str, Any]]]:
    files = sorted(CASES.joinpath("github").glob("*.json"))
    return [(f.name.split(".", 1)[0], json.loads(f.read_bytes())) for f in files]


@pytest.mark.parametrize(("event", "body"), _github_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_github_titles_survive_empty_null_and_missing_fields(event: str, body: dict[str, Any]) -> None:
    for where, p in _variants(body):
        action = p.get("action") if isinstance(p.get("action"), str) else None
        _check(title_for(event, action or None, p), f"{event}: {where}")


@pytest.mark.parametrize("event", ["pull_request_review_comment", "discussion_comment", "commit_comment",
                                   "workflow_run", "check_run", "release", "push"])
def test_github_titles_of_sparse_payloads(event: str) -> None:
    sparse: dict[str, Any] = {"repository": {"full_name": "acme/api"}, "sender": {"login": "octo"},
                              "comment": {"user": {"login": "octo"}, "body": "x", "commit_id": "abcdef123"},
                              "pull_request": {"number": 1, "title": "t"}, "discussion": {"number": 2, "title": "d"},
                              "workflow_run": {"name": "CI", "conclusion": "success"}, "workflow": {"name": "CI"},
                              "check_run": {"name": "lint", "app": {"name": "app"}}, "release": {"tag_name": "v1"},
                              "ref": "refs/heads/main", "commits": []}
    for where, p in _variants(sparse):
        _check(title_for(event, "created", p), f"{event}: {where}")


def _provider_payloads() -> Iterator[tuple[str, dict[str, Any]]]:
    for provider in PROVIDERS:
        if provider not in ("github",):
            yield provider, payload(provider)
    for body in GITLAB.values():
        yield "gitlab", body
    for body in DISCORD_EXTRA:
        yield "discord", {**payload("discord"), **body}
    yield "telegram", {"update_id": 1, "callback_query": {"id": "1", "from": {"id": 1, "first_name": "A"},
                                                          "data": "ok"}}


@pytest.mark.parametrize(("provider", "body"), list(_provider_payloads()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_provider_title_survives_empty_null_and_missing_fields(provider: str, body: dict[str, Any]) -> None:
    adapter = adapter_for(provider)
    headers = {"content-type": "application/json", "x-gitea-event": "issues", "x-forgejo-event": "issues"}
    for where, p in _variants(body):
        try:
            envelope = adapter.parse(json.dumps(p).encode(), headers)
        except InvalidArgument:
            continue  # refused as malformed: no title to show
        _check(envelope.title, f"{provider}: {where}")


@pytest.mark.parametrize("inner", SLACK_EXTRA)
def test_slack_interaction_titles_survive_empty_null_and_missing_fields(inner: dict[str, Any]) -> None:
    from urllib.parse import quote_plus

    adapter = adapter_for("slack")
    form = {"content-type": "application/x-www-form-urlencoded"}
    for where, p in _variants(inner):
        envelope = adapter.parse(("payload=" + quote_plus(json.dumps(p))).encode(), form)
        _check(envelope.title, f"slack interaction: {where}")
    command = {"command": "/deploy", "text": "", "user_id": "U1", "team_id": "T1"}
    for where, p in _variants(command):
        from urllib.parse import urlencode

        body = urlencode({k: ("" if v is None else v) for k, v in p.items()}).encode()
        try:
            envelope = adapter.parse(body, form)
        except InvalidArgument:
            continue
        _check(envelope.title, f"slack command: {where}")


def test_the_reported_titles_have_their_right_values() -> None:
    repo = {"full_name": "acme/api"}
    run = {"workflow_run": {"name": "", "display_title": "Bump deps", "conclusion": "success"}, "repository": repo}
    assert title_for("workflow_run", "completed", run) == 'Workflow "Bump deps" completed (success) in acme/api'
    run["workflow_run"] = {"name": None}
    assert title_for("workflow_run", "completed", {**run, "workflow": {"name": "CI"}}) == \
        'Workflow "CI" completed in acme/api'
    assert title_for("workflow_run", "requested", run) == "A workflow run requested in acme/api"
    push = {"ref": "refs/tags/v1.2", "commits": [], "repository": repo}
    assert title_for("push", None, push) == "Tag v1.2 pushed in acme/api"
    assert title_for("push", None, {**push, "deleted": True}) == "Tag v1.2 deleted in acme/api"
    assert title_for("push", None, {**push, "ref": "refs/heads/a/b", "deleted": True}) == \
        "Branch a/b deleted in acme/api"
    assert title_for("push", None, {**push, "ref": "refs/heads/new", "created": True}) == \
        "Branch new created in acme/api"
    assert title_for("push", None, {**push, "ref": ""}) == "Push in acme/api: 0 commits"
    assert title_for("issues", "opened", {"issue": {"number": None, "title": ""}, "repository": repo}) == \
        "Issue opened in acme/api"
    gl = adapter_for("gitlab").parse(json.dumps(GITLAB["tag_push"]).encode(), {})
    assert gl.title == "Tag v1.2 pushed in acme/api"
