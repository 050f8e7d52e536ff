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


# -- found by mutation testing (issue 17) ------------------------------------------------------------

KINDS = {
    "github_pat_classic": "github_pat", "github_pat_fine_grained": "github_fine_grained_pat",
    "github_app_installation": "github_app_token", "github_app_user": "github_app_token",
    "github_oauth": "github_oauth", "github_refresh": "github_refresh_token", "slack_bot_token": "slack_bot_token",
    "slack_user_token": "slack_user_token", "slack_app_token": "slackappleveltoken",
    "slack_webhook_url": "slack_webhook_url", "discord_webhook_url": "discord_webhook_url",
    "teams_webhook_url": "teams_webhook_url", "aws_access_key_id": "aws_access_key_id",
    "aws_secret_access_key": "aws_secret_access_key", "aws_secret_access_key_field": "aws_secret_access_key",
    "stripe_secret_key": "stripe_access_token", "stripe_restricted_key": "stripe_access_token",
    "openai_project_key": "openai_api_key", "anthropic_api_key": "anthropic_api_key",
    "google_api_key": "gcp_api_key", "jwt": "jwt", "pem_rsa_private_key": "private_key",
    "pem_openssh_private_key": "private_key", "pem_ec_private_key": "private_key", "url_password": "url_password",
    "password_field": "password_field", "api_key_field": "secret_field", "client_secret_field": "secret_field",
    "query_access_token": "query_token", "npm_token": "npmjsaccesstoken", "gitlab_pat": "gitlab_pat",
    "sendgrid_key": "sendgrid", "twilio_api_key": "twilio_api_key", "huggingface_token": "huggingface_access_token",
    "digitalocean_pat": "digitaloceanapikey", "shopify_access_token": "shopify_access_token",
    "pypi_token": "pypi_upload_token",
}


def test_each_planted_format_is_reported_with_its_type() -> None:
    """The ``type=`` an agent sees names the rule that found the value (scanner rule ids
    reduced to ``[a-z0-9_]``, or our own rule's name)."""
    kinds = {}
    for item in corpus():
        red = secrets.redact(plant(ISSUE, item))
        kinds[item.fmt] = next(r.kind for r in red.refs if r.value == item.value)
    assert kinds == KINDS


def test_a_value_that_also_occurs_in_a_ref_does_not_corrupt_it() -> None:
    """``password`` is a (bad) URL password and also part of ``type=url_password``."""
    text = "https://user:password@example.com/x and https://b:hunter2hunter2@y.example.com/"
    red = secrets.redact({"u": text, "w": "password"})
    out = red.payload["u"]
    assert out.count("[secret ref=") == 2 and out.count("]") == 2, out
    assert red.payload["w"].startswith("[secret ref=") and red.payload["w"].endswith("type=url_password]")
    scrubbed = secrets.scrub(f"{out} and password", red.refs)
    assert scrubbed is not None and scrubbed.count("[secret ref=") == 3 and "password@" not in scrubbed


def test_scrub_replaces_values_of_six_characters_or_more_longest_first() -> None:
    token = corpus()[0].value
    red = secrets.redact({"config": {"password": "abc123", "pwd": "ab12"}, "body": f"x {token}"})
    refs = {r.value: r for r in red.refs}
    line = f"login abc123 / ab12 with {token} and {token[:-4]}"
    assert secrets.scrub(line, red.refs) == (f"login {refs['abc123'].rendered} / ab12 with "
                                              f"{refs[token].rendered} and {token[:-4]}")
    assert secrets.scrub(None, red.refs) is None
    assert secrets.scrub("nothing here", red.refs) == "nothing here"
    assert secrets.scrub("abc123", []) == "abc123"


def test_a_six_character_field_value_is_replaced_everywhere_a_shorter_one_in_its_field_only() -> None:
    token = corpus()[0].value
    red = secrets.redact({"password": "abc123", "pin": {"password": "ab1"}, "title": "abc123 lab1 ab1",
                          "body": f"see {token}"})
    assert "abc123" not in json.dumps(red.payload)
    assert red.payload["title"].endswith(" lab1 ab1")
    assert red.payload["pin"]["password"].startswith("[secret ref=")


def test_secrets_inside_lists_are_found_and_keep_the_nearest_key() -> None:
    token = corpus()[0].value
    red = secrets.redact({"items": ["plain", f"x {token} y"], "password": ["hunter2hunter2", "swordfish1"]})
    assert token not in json.dumps(red.payload)
    assert red.payload["password"][0].startswith("[secret ref=") and "password_field" in red.payload["password"][0]
    assert red.payload["password"][1].startswith("[secret ref=")


def test_leaves_after_a_rendered_ref_or_a_secret_field_are_still_scanned() -> None:
    query = "https://api.example.com/v1/hook?access_token=QWxhZGRpbjpvcGVuIHNlc2FtZQ12&x=1"
    rendered = "[secret ref=sec_" + "A" * 32 + " type=github_pat]"
    red = secrets.redact({"a": rendered, "password": "hunter2hunter2", "z": f"call {query}"})
    assert red.payload["a"] == rendered
    assert "QWxhZGRpbjpvcGVuIHNlc2FtZQ12" not in red.payload["z"]
    assert {r.kind for r in red.refs} == {"password_field", "query_token"}


def test_url_userinfo_markers_are_not_passwords_but_a_real_password_after_one_is() -> None:
    """``x-oauth-basic`` marks a token in the user part (the scanner's URI rule may take the
    whole URL); it is never reported as the URL's password itself."""
    def url_passwords(text: str) -> list[str]:
        return [r.value for r in secrets.redact({"u": text}).refs if r.kind == "url_password"]

    assert url_passwords("git clone https://ghx:x-oauth-basic@github.com/a/b.git") == []
    assert url_passwords("https://t:x-oauth-basic@github.com/a then https://b:hunter2hunter2@git.example.com/") == [
        "hunter2hunter2"]
    assert url_passwords("https://t:X-OAUTH-BASIC@github.com/a then https://b:hunter2hunter2@git.example.com/") == [
        "hunter2hunter2"]


def test_given_findings_are_used_instead_of_a_new_scan() -> None:
    red = secrets.redact({"a": "say hello!! twice: hello!!"}, [secrets.Found("hello!!", "custom")])
    assert red.payload["a"].count("type=custom]") == 2 and [r.kind for r in red.refs] == ["custom"]


def test_many_fields_before_a_token_keep_its_offsets_exact() -> None:
    token = corpus()[0].value
    payload = {f"k{n}": f"é漢字 field {n} 🙂" for n in range(20)}
    payload["last"] = f"ü before {token} after ü"
    red = secrets.redact(payload)
    assert red.payload["last"] == f"ü before {red.refs[0].rendered} after ü"
    assert all(red.payload[f"k{n}"] == payload[f"k{n}"] for n in range(20))


def test_warm_up_compiles_the_scanner() -> None:
    secrets.warm_up()
    assert [r.kind for r in secrets.redact({"b": corpus()[0].value}).refs] == ["github_pat"]


def test_a_fresh_scanner_compiles_its_catalogue_once_and_finds_a_token() -> None:
    token = corpus()[0].value
    scanner = secrets._Kingfisher()
    found = scanner.scan(f"token: {token}\n".encode())
    assert [f.rule_id for f in found] == ["betterleaks.github-pat"]
    assert scanner.scanner() is scanner.scanner()


@pytest.mark.parametrize(
    ("rule_id", "kind"),
    [
        ("betterleaks.github-pat", "github_pat"),
        ("veles.secrets/digitaloceanapikey", "digitaloceanapikey"),
        ("betterleaks.aws.secret-key", "aws_secret_key"),
        ("veles.secrets/v2/slackappleveltoken", "slackappleveltoken"),
        ("betterleaks.Slack App token!", "slack_app_token_"),
        ("betterleaks." + "a" * 70, "a" * 60),
        ("veles.secrets/", "secret"),
    ],
)
def test_a_scanner_rule_id_is_reduced_to_a_short_type(rule_id: str, kind: str) -> None:
    """The last path segment, without the catalogue name before its first dot, in
    ``[a-z0-9_]``, at most 60 characters; ``secret`` when nothing is left."""
    assert secrets._kind_of_rule(rule_id) == kind


class _Finding:
    def __init__(self, start: int, end: int) -> None:
        self.rule_id = "fake.rule"
        self._location = {"start_offset": start, "end_offset": end}

    def to_dict(self) -> dict:
        return {"location": self._location}


class _FakeScanner:
    """Stands in for Kingfisher: reports the byte spans ``spans(doc)`` gives."""

    def __init__(self, spans) -> None:
        self._spans = spans

    def scan(self, doc: bytes) -> list[_Finding]:
        return [_Finding(start, end) for start, end in self._spans(doc)]


def test_scanner_findings_outside_a_value_are_skipped_and_later_ones_still_count(monkeypatch) -> None:
    # The document is "a: first value\nb: second TOKEN1234 value\n".
    def spans(doc: bytes) -> list[tuple[int, int]]:
        second = doc.index(b"b: ")
        token = doc.index(b"TOKEN1234")
        return [
            (0, 2),  # inside the first key's prefix
            (second - 1, second + 1),  # the newline and the next key
            (second, second + 2),  # inside the second key's prefix
            (token, token + 9),
        ]

    monkeypatch.setattr(secrets, "_KINGFISHER", _FakeScanner(spans))
    red = secrets.redact({"a": "first value", "b": "second TOKEN1234 value"})
    assert [(r.value, r.kind) for r in red.refs] == [("TOKEN1234", "rule")]
    assert red.payload == {"a": "first value", "b": f"second {red.refs[0].rendered} value"}


def test_scanner_offsets_inside_a_character_replace_the_whole_field(monkeypatch, caplog) -> None:
    def spans(doc: bytes) -> list[tuple[int, int]]:
        start = doc.index("é".encode()) + 1  # the second byte of "é"
        return [(start, doc.index(b" end"))]

    monkeypatch.setattr(secrets, "_KINGFISHER", _FakeScanner(spans))
    red = secrets.redact({"body": "café TOKEN1234 end"})
    assert [(r.value, r.kind) for r in red.refs] == [("café TOKEN1234 end", "rule")]
    assert red.payload == {"body": red.refs[0].rendered}
    assert [r.getMessage() for r in caplog.records if r.name == secrets.__name__] == [
        "secret scanner offsets for rule fake.rule do not cut a whole character; replacing the whole field"
    ]


def test_a_lone_surrogate_in_one_field_does_not_stop_the_scan_of_the_others() -> None:
    token = corpus()[0].value
    red = secrets.redact({"a": "lone \ud800 surrogate", "b": f"x {token}"})
    assert [r.kind for r in red.refs] == ["github_pat"]
    assert red.payload == {"a": "lone \ud800 surrogate", "b": f"x {red.refs[0].rendered}"}


def test_leaves_shorter_than_eight_characters_are_not_scanned() -> None:
    assert secrets.redact({"u": "://:p@h"}).refs == []
    assert [(r.value, r.kind) for r in secrets.redact({"u": "://:pw@h"}).refs] == [("pw", "url_password")]


def test_a_value_whose_prefix_is_another_value_is_replaced_whole() -> None:
    found = [secrets.Found("hunter2hunter2", "short"), secrets.Found("hunter2hunter2xyz", "long")]
    red = secrets.redact({"t": "x hunter2hunter2xyz y hunter2hunter2"}, found)
    refs = {r.kind: r for r in red.refs}
    assert red.payload["t"] == f"x {refs['long'].rendered} y {refs['short'].rendered}"
    assert secrets.scrub("x hunter2hunter2xyz y", red.refs) == f"x {refs['long'].rendered} y"


def test_non_string_keys_are_kept_as_they_are() -> None:
    token = corpus()[0].value
    red = secrets.redact({1: "one", "b": f"x {token}"})
    assert red.payload == {1: "one", "b": f"x {red.refs[0].rendered}"}
