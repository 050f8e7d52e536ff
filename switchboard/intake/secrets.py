"""Finding secret values in a decoded payload and replacing them with refs (DESIGN.md §5, issue 4).

Two sources of findings, both run on every decoded string leaf (after the channel-break check):

- **Kingfisher** (``kingfisher-secret-scanner``, MongoDB's Rust scanner with its bundled rule
  catalogue, all confidence levels, scanned offline): provider tokens such as GitHub, Slack,
  AWS, Stripe, OpenAI, Anthropic, Google keys. The leaves are scanned as one document of
  ``key: value`` lines, so rules that need a key name nearby (an AWS secret key) see one; each
  finding's byte offsets are mapped back to its leaf and must cut the exact value.
- **Our rules** for what scanners miss in webhooks: values under secret-like key names
  (``password``, ``token``, ``api_key``, ``client_secret``…), passwords in URL userinfo,
  token-like query parameters, Slack/Discord/Teams webhook URLs, whole PEM private-key blocks
  and whole JWTs.

Each distinct value gets one ref (``sec_`` + 24 url-safe random bytes) and is replaced, longest
first, everywhere it occurs in the payload (string leaves and keys), rendered as
``[secret ref=sec_… type=github_pat]``. A value under a secret-like key shorter than
:data:`MIN_GLOBAL_LENGTH` is replaced in that field only, so a password ``"x"`` does not eat
every ``x`` in the payload.

Values never reach a log line: :class:`MintedRef` hides its value from ``repr``.
"""

from __future__ import annotations

import bisect
import logging
import re
import secrets as _random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

REF_PREFIX = "sec_"
REF_PATTERN = re.compile(r"sec_[A-Za-z0-9_-]{32}")
MIN_GLOBAL_LENGTH = 6
"""Shortest value (characters) replaced everywhere in the payload rather than in its field only."""

_RENDERED = re.compile(r"\[secret ref=sec_[A-Za-z0-9_-]{32} type=[a-z0-9_]+\]")

_SECRET_KEYS = frozenset({
    "password", "passwd", "pwd", "pass", "passphrase", "secret", "token", "apikey", "apitoken",
    "accesstoken", "refreshtoken", "authtoken", "idtoken", "bearertoken", "clientsecret", "secretkey",
    "privatekey", "accesskey", "secretaccesskey", "awssecretaccesskey", "signingsecret", "webhooksecret",
    "sharedsecret", "authorization", "credentials", "credential", "sessiontoken", "xapikey", "bottoken",
    "appsecret", "consumersecret", "masterkey", "encryptionkey", "dbpassword", "connectionstring",
})
_SECRET_SUFFIXES = ("password", "passwd", "secret", "token", "apikey", "privatekey", "secretkey", "accesskey")
_NOT_SECRET_KEYS = frozenset({"tokentype", "secretname", "passwordpolicy", "tokenurl", "tokenendpoint"})
_MASKED = re.compile(r"^(?:\*+|x+|•+|\[redacted\]|redacted|null|none|true|false|<redacted>)$", re.IGNORECASE)

# (kind, literals one of which must be in the text, pattern, group holding the value). The
# literals are a cheap C-speed pre-check; most leaves skip most patterns.
_OWN_RULES: list[tuple[str, tuple[str, ...], re.Pattern[str], int]] = [
    ("private_key", ("-----BEGIN",), re.compile(
        r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----[\s\S]*?-----END \1-----"), 0),
    ("aws_access_key_id", ("AKIA", "ASIA", "ABIA", "ACCA"),
     re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b"), 0),
    ("jwt", ("eyJ",), re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), 0),
    ("slack_webhook_url", ("hooks.slack",), re.compile(
        r"https?://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]+"), 0),
    ("discord_webhook_url", ("/webhooks/",), re.compile(
        r"https?://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/(?:v\d+/)?webhooks/\d+/[A-Za-z0-9_-]+"), 0),
    ("teams_webhook_url", (".webhook.office.com",), re.compile(
        r"https://[A-Za-z0-9-]+\.webhook\.office\.com/webhook(?:b2)?/[^\s\"'<>]+"), 0),
    ("teams_workflow_url", (".logic.azure.com",), re.compile(
        r"https://[A-Za-z0-9.-]+\.logic\.azure\.com(?::\d+)?/workflows/[^\s\"'<>]*?sig=[^\s\"'<>&]+"), 0),
    # The hint below requires "@" as well.
    ("url_password", ("://",), re.compile(r"://[^:/?#@\s\"'<>]{0,128}:([^/?#@\s\"'<>]{1,256})@[A-Za-z0-9\[]"), 1),
]
# A leaf that matches none of these cannot match any rule above or the query rule below:
# one C-speed search skips most leaves (node ids, API URLs, names).
_HINT = re.compile("|".join(re.escape(lit) for _k, lits, _p, _g in _OWN_RULES for lit in lits if lit != "://")
                   + "|@|=")
# Query parameters whose value is a credential (matched by name after a generic parameter regex:
# one simple pattern is much faster than a case-insensitive alternation).
_QUERY = re.compile(r"[?&;]([A-Za-z_-]{2,30})=([^&#\s\"'<>]{8,})")
_QUERY_NAMES = frozenset({
    "access_token", "token", "auth", "auth_token", "api_key", "apikey", "api-key", "secret", "client_secret",
    "password", "passwd", "pwd", "sig", "signature", "x-amz-signature", "x-amz-security-token",
    "x-goog-signature", "private_token", "refresh_token", "id_token", "session_token", "jwt", "key",
})
# Userinfo "passwords" that are really markers (the token sits in the user part instead).
_URL_PASSWORD_MARKERS = frozenset({"x-oauth-basic", "x-oauth", ""})


@dataclass(frozen=True)
class Found:
    """A secret value found in a payload.

    Attributes:
        value: the exact text to replace.
        kind: a short type in ``[a-z0-9_]`` (``github_pat``, ``password_field``, ``jwt``).
        path: for a value under a secret-like key, that field's path (replaced there whatever its
            length); ``None`` for scanner and pattern findings.
    """

    value: str = field(repr=False)
    kind: str
    path: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class MintedRef:
    """A minted ref and the value it stands for (``repr`` never shows the value)."""

    ref: str
    kind: str
    value: str = field(repr=False)

    @property
    def rendered(self) -> str:
        """How the ref appears in text: ``[secret ref=sec_… type=github_pat]``."""
        return render_ref(self.ref, self.kind)


@dataclass(frozen=True)
class Redaction:
    """A sanitised payload and the refs that replaced values in it."""

    payload: Any
    refs: list[MintedRef]


def new_ref() -> str:
    """A fresh ref: ``sec_`` + 24 url-safe random bytes (32 characters)."""
    return REF_PREFIX + _random.token_urlsafe(24)


def render_ref(ref: str, kind: str) -> str:
    """``[secret ref=<ref> type=<kind>]``, the form a ref takes in text."""
    return f"[secret ref={ref} type={kind}]"


class _Kingfisher:
    """One compiled Kingfisher scanner per process (compiling the catalogue takes about 1 s)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scanner: Any = None

    def scanner(self) -> Any:
        with self._lock:
            if self._scanner is None:
                from kingfisher_sdk import Rules, Scanner

                self._scanner = Scanner(Rules(confidence="low"))
            return self._scanner

    def scan(self, doc: bytes) -> list[Any]:
        """Scan one document; serialised, as the SDK does not promise a scanner is thread-safe."""
        scanner = self.scanner()
        with self._lock:
            return list(scanner.scan(doc))


_KINGFISHER = _Kingfisher()


def warm_up() -> None:
    """Compile the scanner rules now rather than on the first delivery."""
    _KINGFISHER.scan(b"warm up")


def _leaves(value: Any) -> list[tuple[tuple[Any, ...], str, str]]:
    """``(path, nearest key, text)`` for every string leaf, dict keys included, in document order.

    A key is scanned as text (nearest key ``""``, so no key-name rule applies to it): a token
    pasted as a map key is found like one in a value. Its path is :data:`_KEY_PATH`, which no
    value path equals, so a field-scoped finding never lands on it.

    A list filled by one recursive function called per container: a generator per value
    (``yield from``) passed every leaf up through each level, a third of :func:`find`'s time
    on a 28 KB GitHub ``pull_request`` payload (issue 11). The depth is bounded at intake
    (``json_shape``).
    """
    out: list[tuple[tuple[Any, ...], str, str]] = []
    add = out.append

    def walk(item: Any, path: tuple[Any, ...], key: str) -> None:  # a dict or a list
        if isinstance(item, dict):
            for k, child in item.items():
                if isinstance(k, str):
                    add((_KEY_PATH, "", k))
                if isinstance(child, str):
                    add(((*path, k), str(k), child))
                elif isinstance(child, (dict, list)):
                    walk(child, (*path, k), str(k))
        else:
            for i, child in enumerate(item):
                if isinstance(child, str):
                    add(((*path, i), key, child))
                elif isinstance(child, (dict, list)):
                    walk(child, (*path, i), key)

    if isinstance(value, str):
        add(((), "", value))
    elif isinstance(value, (dict, list)):
        walk(value, (), "")
    return out


_KEY_PATH = (object(),)  # the path of a dict key's own leaf: equal to no value's path


@lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    norm = re.sub(r"[^a-z0-9]", "", key.lower())
    if not norm or norm in _NOT_SECRET_KEYS:
        return False
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_SUFFIXES)


def _kind_of_rule(rule_id: str) -> str:
    tail = rule_id.rsplit("/", 1)[-1].split(".", 1)[-1]
    return re.sub(r"[^a-z0-9_]", "_", tail.lower().replace("-", "_"))[:60] or "secret"


def _scan_kingfisher(leaves: list[tuple[tuple[Any, ...], str, str]]) -> list[Found]:
    """Scan all leaves as one document; map each finding's byte offsets back to its leaf.

    The document is ``key: text`` lines, joined and encoded once. The lines' byte offsets are
    counted only when the scanner found something (rarely): from their characters when the
    document is ASCII, from their encodings otherwise.
    """
    lines = [f"{key}: {text}\n" for _path, key, text in leaves]
    if not lines:
        return []
    joined = "".join(lines)
    doc = joined.encode("utf-8", errors="surrogatepass")
    findings = _KINGFISHER.scan(doc)
    if not findings:
        return []
    ascii_doc = len(doc) == len(joined)
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for (_path, key, _text), line in zip(leaves, lines, strict=True):
        if ascii_doc:
            size, head = len(line), len(key) + 2
        else:
            size = len(line.encode("utf-8", errors="surrogatepass"))
            head = len(f"{key}: ".encode("utf-8", errors="surrogatepass"))
        starts.append(pos + head)
        ends.append(pos + size - 1)
        pos += size
    found: list[Found] = []
    for finding in findings:
        loc = finding.to_dict()["location"]
        start, end = int(loc["start_offset"]), int(loc["end_offset"])
        i = bisect.bisect_right(starts, start) - 1
        if i < 0:
            continue
        start, end = max(start, starts[i]), min(end, ends[i])
        if end <= start:
            continue
        try:
            value = doc[start:end].decode("utf-8")
        except UnicodeDecodeError:
            log.warning("secret scanner offsets for rule %s do not cut a whole character; "
                        "replacing the whole field", finding.rule_id)
            value = leaves[i][2]
        found.append(Found(value, _kind_of_rule(finding.rule_id)))
    return found


def find(payload: Any) -> list[Found]:
    """Every secret value in ``payload`` (see the module docstring for the rules).

    Args:
        payload: a parsed JSON value.

    Returns:
        Findings in no particular order; the same value may appear more than once.
    """
    leaves = _leaves(payload)
    found: list[Found] = []
    for path, key, text in leaves:
        # A rendered ref is left alone; it holds "=", so the hint below passes it to that test.
        if key and _secret_key(key) and not _MASKED.match(text.strip()) and text.strip():
            if not _RENDERED.fullmatch(text):
                found.append(Found(text, "password_field" if "pass" in key.lower() else "secret_field", path))
            continue
        if len(text) < 8 or _HINT.search(text) is None or _RENDERED.fullmatch(text):
            continue
        for kind, literals, pattern, group in _OWN_RULES:
            if not any(literal in text for literal in literals):
                continue
            for m in pattern.finditer(text):
                value = m.group(group)
                if kind == "url_password" and value.lower() in _URL_PASSWORD_MARKERS:
                    continue
                found.append(Found(value, kind))
        if "=" in text:
            for m in _QUERY.finditer(text):
                if m.group(1).lower() in _QUERY_NAMES:
                    found.append(Found(m.group(2), "query_token"))
    found.extend(_scan_kingfisher([leaf for leaf in leaves if len(leaf[2]) >= 8]))
    return found


def redact(payload: Any, found: list[Found] | None = None) -> Redaction:
    """Replace every found value with its rendered ref, longest first, everywhere.

    Args:
        payload: a parsed JSON value (not modified).
        found: findings (default: :func:`find` on ``payload``).

    Returns:
        The sanitised copy and one :class:`MintedRef` per distinct value.
    """
    found = find(payload) if found is None else found
    if not found:
        return Redaction(payload, [])
    by_value: dict[str, MintedRef] = {}
    # Longest first: a webhook URL is replaced whole before the token inside it is looked for.
    # For one value found by several rules, a scanner's specific type beats a key-name rule's.
    for item in sorted(found, key=lambda f: (-len(f.value), f.path is not None)):
        if item.value not in by_value:
            by_value[item.value] = MintedRef(new_ref(), item.kind, item.value)
    field_values = {f.path: by_value[f.value] for f in found if f.path is not None}
    global_refs = sorted((r for v, r in by_value.items() if len(v) >= MIN_GLOBAL_LENGTH
                          or any(f.value == v and f.path is None for f in found)),
                         key=lambda r: -len(r.value))

    replace_all = _replacer(global_refs)

    def text(s: str) -> str:
        return replace_all(s) if replace_all is not None else s

    def walk(value: Any, path: tuple[Any, ...]) -> Any:
        if isinstance(value, str):
            ref = field_values.get(path)
            return ref.rendered if ref is not None else text(value)
        if isinstance(value, dict):
            return {text(k) if isinstance(k, str) else k: walk(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        return value

    return Redaction(walk(payload, ()), list(by_value.values()))


def scrub(text: str | None, refs: list[MintedRef]) -> str | None:
    """Belt and braces for rendered text: replace any value of ``refs`` still present, longest first."""
    if text is None:
        return None
    replace_all = _replacer(sorted((r for r in refs if len(r.value) >= MIN_GLOBAL_LENGTH), key=lambda r: -len(r.value)))
    return replace_all(text) if replace_all is not None else text


def _replacer(refs: list[MintedRef]) -> Callable[[str], str] | None:
    """A function replacing every value of ``refs`` (longest first) in one pass, or ``None``.

    One pass, and rendered refs already in the text are kept whole: a value such as
    ``password`` also occurs in ``type=url_password``, and replacing value after value would
    write a ref inside another.
    """
    if not refs:
        return None
    rendered = {r.value: r.rendered for r in refs}
    pattern = re.compile(f"({_RENDERED.pattern})|" + "|".join(re.escape(r.value) for r in refs))
    return lambda s: pattern.sub(lambda m: m.group(1) or rendered[m.group(0)], s)
