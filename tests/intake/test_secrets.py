"""Secrets to refs: the planted corpus, quiet on real GitHub payloads, replacement rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchboard.intake import secrets
from tests.conftest import CASES
from tests.intake.planted_secrets import Planted, corpus, plant

GITHUB = sorted((CASES / "github").glob("*.json"))
ISSUE = json.loads((CASES / "github" / "issues.opened.json").read_bytes())


def test_planted_corpus_has_at_least_25_formats_and_every_one_is_replaced() -> None:
    items = corpus()
    assert len({i.fmt for i in items}) >= 25
    missed = []
    for item in items:
        red = secrets.redact(plant(ISSUE, item))
        if item.value in json.dumps(red.payload, ensure_ascii=False):
            missed.append(item.fmt)
    assert missed == [], f"replaced {1 - len(missed) / len(items):.0%}; missed {missed}"


def _everywhere(item: Planted) -> dict:
    """``item`` planted in its context, then repeated: twice more in one string, in a list, as
    a dict key (alone and inside a longer key), in a nested key and in another field."""
    p = plant(ISSUE, item)
    v = item.value
    if "body" in p.get("issue", {}):
        p["issue"]["body"] = p["issue"]["body"] + "\n\nagain:\n" + p["issue"]["body"]
    p["comment"] = {"body": f"it was {v}, yes {v}; and {v}", "lines": ["x", v, f"{v}{v}"]}
    p["index"] = {v: "seen", f"key {v} here": {v: [v]}, "n": 1}
    return p


def test_every_occurrence_and_every_key_position_of_a_planted_secret_is_replaced() -> None:
    missed = []
    for item in corpus():
        payload = _everywhere(item)
        red = secrets.redact(payload)
        text = json.dumps(red.payload, ensure_ascii=False)
        if item.value in text:
            missed.append(f"{item.fmt}: {text.count(item.value)} left")
        # One ref per value, however often and wherever it appeared.
        assert sum(1 for r in red.refs if r.value == item.value) == 1, item.fmt
    assert missed == [], f"missed {missed}"


def test_a_secret_that_appears_only_as_a_dict_key_is_found() -> None:
    token = corpus()[0].value
    red = secrets.redact({"labels": {token: {"color": "red"}}, "map": {f"prefix {token}": 1}})
    assert token not in json.dumps(red.payload)
    assert [r.kind for r in red.refs] == ["github_pat"]
    assert red.payload["labels"] == {f"[secret ref={red.refs[0].ref} type=github_pat]": {"color": "red"}}


@pytest.mark.parametrize("path", GITHUB, ids=[p.name for p in GITHUB])
def test_real_github_payloads_get_zero_replacements(path: Path) -> None:
    payload = json.loads(path.read_bytes())
    red = secrets.redact(payload)
    assert red.refs == [] and red.payload == payload


def test_a_value_is_replaced_everywhere_with_one_ref() -> None:
    token = corpus()[0].value
    payload = {"issue": {"body": f"token {token} leaked"},
               "commits": [{"message": f"oops {token}"}, {"message": "fine"}],
               "config": {"token": token}}
    red = secrets.redact(payload)
    assert len(red.refs) == 1
    ref = red.refs[0]
    assert ref.ref.startswith("sec_") and len(ref.ref) == 36
    rendered = f"[secret ref={ref.ref} type={ref.kind}]"
    assert red.payload["issue"]["body"] == f"token {rendered} leaked"
    assert red.payload["commits"][0]["message"] == f"oops {rendered}"
    assert red.payload["config"]["token"] == rendered
    assert token not in json.dumps(red.payload)


def test_longest_value_is_replaced_first() -> None:
    hook = next(i.value for i in corpus() if i.fmt == "slack_webhook_url")
    red = secrets.redact({"text": f"post to {hook} now"})
    assert [r.kind for r in red.refs][0] == "slack_webhook_url" or any(r.value == hook for r in red.refs)
    assert red.payload["text"].count("[secret ref=") == 1 and "hooks.slack.com" not in red.payload["text"]


def test_a_short_password_field_is_replaced_in_its_field_only() -> None:
    red = secrets.redact({"password": "ab1", "title": "lab1 tab1"})
    assert red.payload["title"] == "lab1 tab1"
    assert red.payload["password"].startswith("[secret ref=sec_") and "type=password_field" in red.payload["password"]


def test_masked_and_empty_values_under_secret_keys_are_left_alone() -> None:
    payload = {"config": {"secret": "********", "token": "", "password": None, "content_type": "json"}}
    assert secrets.redact(payload).refs == []


def test_url_password_and_oauth_style_userinfo() -> None:
    red = secrets.redact({"u": "git clone https://bob:hunter2hunter2@git.example.com/x.git"})
    assert "hunter2hunter2" not in red.payload["u"] and "https://bob:[secret ref=" in red.payload["u"]


def test_refs_render_with_type_and_hide_values_in_repr() -> None:
    red = secrets.redact({"body": corpus()[0].value})
    ref = red.refs[0]
    assert ref.rendered == f"[secret ref={ref.ref} type=github_pat]"
    assert ref.value not in repr(ref) and ref.value not in repr(red.refs)


def test_kingfisher_offsets_cut_exact_values_in_non_ascii_text() -> None:
    token = corpus()[0].value
    red = secrets.redact({"body": f"é漢字🙂 {token} ü"})
    assert red.payload["body"].startswith("é漢字🙂 [secret ref=") and red.payload["body"].endswith("] ü")


def test_a_token_under_a_secret_key_keeps_the_scanners_type() -> None:
    token = corpus()[0].value
    red = secrets.redact({"config": {"token": token}})
    assert [r.kind for r in red.refs] == ["github_pat"]
