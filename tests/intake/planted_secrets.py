"""A planted-secret corpus written for Switchboard: fake but well-formed values, 37 formats.

Every value is generated here from a seeded RNG (never a real credential). Each entry plants a
value somewhere a webhook payload would carry it: prose in an issue body, a commit message, a
config-like field, a URL.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

_ALNUM = string.ascii_letters + string.digits
_UPPER_ALNUM = string.ascii_uppercase + string.digits
_HEX = "0123456789abcdef"
_URLSAFE = _ALNUM + "-_"


@dataclass(frozen=True)
class Planted:
    """One planted secret: its format, the value, and how it sits in the payload."""

    fmt: str
    value: str
    where: str  # "body", "commit", "field:<key>", "url"


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64url(json.dumps({"sub": str(rng.randrange(10**8)), "name": "Jane Roe",
                                 "iat": 1716239022, "scope": "repo admin"}).encode())
    return f"{header}.{claims}.{_pick(rng, _URLSAFE, 43)}"


def _pem(rng: random.Random, label: str) -> str:
    body = base64.b64encode(bytes(rng.randrange(256) for _ in range(600))).decode()
    lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----"


def _formats() -> dict[str, tuple[Callable[[random.Random], str], str]]:
    return {
        "github_pat_classic": (lambda r: "ghp_" + _pick(r, _ALNUM, 36), "body"),
        "github_pat_fine_grained": (lambda r: "github_pat_11" + _pick(r, _UPPER_ALNUM, 20) + "_"
                                    + _pick(r, _ALNUM, 59), "commit"),
        "github_app_installation": (lambda r: "ghs_" + _pick(r, _ALNUM, 36), "body"),
        "github_app_user": (lambda r: "ghu_" + _pick(r, _ALNUM, 36), "body"),
        "github_oauth": (lambda r: "gho_" + _pick(r, _ALNUM, 36), "commit"),
        "github_refresh": (lambda r: "ghr_" + _pick(r, _ALNUM, 36), "body"),
        "slack_bot_token": (lambda r: f"xoxb-{_pick(r, string.digits, 12)}-{_pick(r, string.digits, 13)}-"
                            + _pick(r, _ALNUM, 24), "body"),
        "slack_user_token": (lambda r: f"xoxp-{_pick(r, string.digits, 12)}-{_pick(r, string.digits, 12)}-"
                             f"{_pick(r, string.digits, 13)}-{_pick(r, _HEX, 32)}", "commit"),
        "slack_app_token": (lambda r: f"xapp-1-A{_pick(r, _UPPER_ALNUM, 10)}-{_pick(r, string.digits, 13)}-"
                            + _pick(r, _HEX, 64), "body"),
        "slack_webhook_url": (lambda r: f"https://hooks.slack.com/services/T{_pick(r, _UPPER_ALNUM, 8)}/"
                              f"B{_pick(r, _UPPER_ALNUM, 10)}/{_pick(r, _ALNUM, 24)}", "body"),
        "discord_webhook_url": (lambda r: f"https://discord.com/api/webhooks/{_pick(r, string.digits, 19)}/"
                                + _pick(r, _URLSAFE, 68), "field:notify_url"),
        "teams_webhook_url": (lambda r: "https://contoso.webhook.office.com/webhookb2/"
                              f"{_uuid(r)}@{_uuid(r)}/IncomingWebhook/{_pick(r, _HEX, 32)}/{_uuid(r)}", "body"),
        "aws_access_key_id": (lambda r: "AKIA" + _pick(r, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16), "body"),
        "aws_secret_access_key": (lambda r: _pick(r, _ALNUM + "/+", 40), "aws_pair"),
        "aws_secret_access_key_field": (lambda r: _pick(r, _ALNUM + "/+", 40), "field:aws_secret_access_key"),
        "stripe_secret_key": (lambda r: "sk_live_" + _pick(r, _ALNUM, 99), "body"),
        "stripe_restricted_key": (lambda r: "rk_live_" + _pick(r, _ALNUM, 99), "commit"),
        "openai_project_key": (lambda r: "sk-proj-" + _pick(r, _URLSAFE, 74) + "T3BlbkFJ" + _pick(r, _URLSAFE, 74),
                               "body"),
        "anthropic_api_key": (lambda r: "sk-ant-api03-" + _pick(r, _URLSAFE, 93) + "AA", "body"),
        "google_api_key": (lambda r: "AIza" + _pick(r, _URLSAFE, 35), "body"),
        "jwt": (_jwt, "body"),
        "pem_rsa_private_key": (lambda r: _pem(r, "RSA PRIVATE KEY"), "body"),
        "pem_openssh_private_key": (lambda r: _pem(r, "OPENSSH PRIVATE KEY"), "field:deploy_key"),
        "pem_ec_private_key": (lambda r: _pem(r, "EC PRIVATE KEY"), "body"),
        "url_password": (lambda r: _pick(r, _ALNUM, 18), "url"),
        "password_field": (lambda r: _pick(r, _ALNUM + "!#$%", 16), "field:password"),
        "api_key_field": (lambda r: _pick(r, _HEX, 32), "field:api_key"),
        "client_secret_field": (lambda r: _pick(r, _URLSAFE, 40), "field:client_secret"),
        "query_access_token": (lambda r: _pick(r, _URLSAFE, 30), "query"),
        "npm_token": (lambda r: "npm_" + _pick(r, _ALNUM, 36), "commit"),
        "gitlab_pat": (lambda r: "glpat-" + _pick(r, _URLSAFE, 20), "body"),
        "sendgrid_key": (lambda r: "SG." + _pick(r, _URLSAFE, 22) + "." + _pick(r, _URLSAFE, 43), "body"),
        "twilio_api_key": (lambda r: "SK" + _pick(r, _HEX, 32), "body"),
        "huggingface_token": (lambda r: "hf_" + _pick(r, string.ascii_letters, 34), "body"),
        "digitalocean_pat": (lambda r: "dop_v1_" + _pick(r, _HEX, 64), "body"),
        "shopify_access_token": (lambda r: "shpat_" + _pick(r, _HEX, 32), "body"),
        "pypi_token": (lambda r: "pypi-AgEIcHlwaS5vcmc" + _pick(r, _URLSAFE, 70), "body"),
    }


def _uuid(r: random.Random) -> str:
    h = _pick(r, _HEX, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def corpus(seed: int = 4) -> list[Planted]:
    """One planted value per format (37 formats)."""
    rng = random.Random(seed)
    return [Planted(fmt, make(rng), where) for fmt, (make, where) in _formats().items()]


def plant(payload: dict, item: Planted) -> dict:
    """A copy of a GitHub ``issues``/``push``-like payload with ``item`` planted in it."""
    p = json.loads(json.dumps(payload))
    if item.where == "body":
        p.setdefault("issue", {})["body"] = f"Deploy failed, I used this one: {item.value}\nplease rotate it."
    elif item.where == "commit":
        p.setdefault("issue", {})["body"] = f"see the last commit\n\n```\nexport TOKEN={item.value}\n```"
    elif item.where == "aws_pair":
        p.setdefault("issue", {})["body"] = ("my ~/.aws/credentials:\n[default]\naws_access_key_id = AKIA"
                                             f"Z3MQ4W5RHX2T7YLB\naws_secret_access_key = {item.value}\n")
    elif item.where == "url":
        p.setdefault("issue", {})["body"] = f"DATABASE_URL=postgres://app:{item.value}@db.internal:5432/app"
    elif item.where == "query":
        p.setdefault("issue", {})["body"] = f"callback https://api.example.com/v1/hook?access_token={item.value}&x=1"
    else:
        key = item.where.split(":", 1)[1]
        p["config"] = {"name": "ci", key: item.value}
    return p
