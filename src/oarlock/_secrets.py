"""Secrets never reach storage or output: the one place that redacts them.

:func:`redact` replaces, in any text about to be stored (a run's ``error``, a receipt's
error message) or shown (every line the command prints):

* every **configured secret**: the values of the provider key variables
  (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``OPENAI_COMPATIBLE_API_KEY``, and any
  variable whose name ends in ``_API_KEY``, ``_TOKEN``, ``_SECRET`` or ``_PASSWORD``), and
  every value registered where it is configured: :func:`register_secret` (an ``api_key``
  given to a model), :func:`register_named` (an MCP server's headers and environment
  values whose names say they are secret: ``Authorization``, ``X-Api-Key``,
  ``GITHUB_TOKEN``...) and :func:`register_url` (the password and the secret query
  parameters of a base URL);
* **bearer tokens** and other ``Authorization`` header values (``Bearer xyz``,
  ``"authorization": "Basic ..."``);
* **credentials in URLs** (``https://user:password@host`` keeps the user, not the password);
* **well-known key shapes** (``sk-...``, ``sk-ant-...``), whoever configured them.

Each becomes ``[redacted]``. Values shorter than 8 characters are not registered: redacting
them would mangle ordinary text, and no provider issues keys that short.
"""

from __future__ import annotations

import math
import os
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = [
    "REDACTED",
    "looks_secret",
    "redact",
    "redact_json",
    "register_named",
    "register_secret",
    "register_url",
    "secrets_known",
]

REDACTED = "[redacted]"
_MIN_SECRET = 8
_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
_ENV_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_COMPATIBLE_API_KEY")

_SECRET_WORDS = frozenset(
    {
        "auth", "authorization", "cookie", "credential", "credentials", "key", "pass",
        "passwd", "password", "private", "pwd", "secret", "session", "signature", "token",
    }
)  # fmt: skip
_SECRET_ENDINGS = ("key", "token", "secret", "password", "passwd", "credentials")
_SCHEMES = ("bearer ", "basic ", "token ", "bot ")

_lock = threading.Lock()
_registered: set[str] = set()

_PATTERNS = (
    # Authorization: Bearer xyz / "authorization": "Basic xyz" / Bearer xyz
    re.compile(
        r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;]+"
    ),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    # x-api-key: xyz, api_key=xyz, "apiKey": "xyz"
    re.compile(r"(?i)(\b(?:x-)?api[-_]?key\b[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&]+"),
    # scheme://user:password@host
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s/:@]*:)[^\s/@]+(?=@)"),
    # provider key shapes
    re.compile(r"()\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"),
)
# what text must hold (lowercased) for each pattern to match
_WORDS = (("authorization",), ("bearer",), ("api", "key"), ("://",), ("sk-",))


def register_secret(value: str | None) -> None:
    """Redact ``value`` from now on, wherever it appears (if 8 characters or longer)."""
    if isinstance(value, str) and len(value) >= _MIN_SECRET:
        with _lock:
            _registered.add(value)


def looks_secret(name: str) -> bool:
    """Whether a header or variable named ``name`` holds a secret by its name: one of its
    words (split at ``-``, ``_``...) is a secret word or ends like one (``Authorization``,
    ``X-Api-Key``, ``Cookie``, ``GITHUB_TOKEN``, ``PGPASSWORD``; not ``GIT_AUTHOR_NAME``)."""
    if not isinstance(name, str):
        return False
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


def register_named(name: str, value: str | None) -> None:
    """Register ``value`` if ``name`` says it is secret (:func:`looks_secret`); for an
    ``Authorization``-style value (``Bearer xyz``), the credential alone too."""
    if not looks_secret(name) or not isinstance(value, str):
        return
    register_secret(value)
    scheme = value.lower()
    for prefix in _SCHEMES:
        if scheme.startswith(prefix):
            register_secret(value[len(prefix) :].strip())


def register_url(url: str | None) -> None:
    """Register the password of ``url`` (``https://user:password@host``) and the values
    of its query parameters whose names say they are secret (``?api_key=...``)."""
    if not isinstance(url, str) or not url:
        return
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return
    if password:
        register_secret(password)
        register_secret(unquote(password))
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        register_named(name, value)


# the secrets of the environment, with the environment they were read from: read again
# only when it changed (a server renders thousands of values a second)
_env_seen: list[tuple[tuple[Any, ...], list[str]]] = []


def _env_secrets() -> list[str]:
    raw = getattr(os.environ, "_data", None)  # the bytes behind os.environ, on POSIX
    key = tuple(raw.items()) if isinstance(raw, dict) else None
    if key is not None and _env_seen and _env_seen[0][0] == key:
        return list(_env_seen[0][1])
    found = []
    for name, value in os.environ.items():
        upper = name.upper()
        if (upper in _ENV_NAMES or upper.endswith(_ENV_SUFFIXES)) and len(value) >= _MIN_SECRET:
            found.append(value)
    if key is not None:
        _env_seen[:] = [(key, found)]
    return found


def secrets_known() -> list[str]:
    """Every configured secret value, longest first (so that a secret containing another
    is redacted whole)."""
    with _lock:
        values = set(_registered)
    values.update(_env_secrets())
    return sorted(values, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every configured secret, bearer token, authorization value and URL
    password replaced by ``[redacted]``."""
    if not text:
        return text
    for secret in secrets_known():
        if secret in text:
            text = text.replace(secret, REDACTED)
    # ASCII text lacking a pattern's words cannot match it: skip the scan (the patterns
    # cost most of a large text's redaction); other text is scanned by every pattern
    low = text.lower() if text.isascii() else None
    for pattern, words in zip(_PATTERNS, _WORDS, strict=True):
        if low is None or all(w in low for w in words):
            text = pattern.sub(_keep_prefix, text)
    return text


def _keep_prefix(match: re.Match[str]) -> str:
    prefix = match.group(1)
    rest = match.group(0)[len(prefix) :]
    return match.group(0) if rest == REDACTED else prefix + REDACTED


def redact_json(value: Any) -> tuple[Any, list[str]]:
    """``value`` (a JSON value) as it reads once printed as JSON and redacted (what
    :func:`oarlock._render.dumps` prints), and the JSON Pointers (RFC 6901) of the values
    that redaction changed, so that output which redacts can say where. An object one of
    whose member names is redacted is redacted whole (its pointer is the object's)."""
    import json

    text = json.dumps(value, ensure_ascii=False)
    shown = redact(text)
    if shown == text:
        return value, []
    try:
        copy = json.loads(shown)
    except ValueError:  # a configured secret cut across JSON syntax: redact part by part
        copy = _redact_parts(value)
    pointers: list[str] = []
    _changed(value, copy, "", pointers)
    return copy, pointers


def _redact_parts(value: Any) -> Any:
    import json

    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if redact(json.dumps(key, ensure_ascii=False)) != json.dumps(key, ensure_ascii=False):
                return REDACTED
            out[key] = redact_json(item)[0]
        return out
    if isinstance(value, list):
        return [redact_json(item)[0] for item in value]
    return REDACTED  # a scalar whose redacted JSON does not read back


def _changed(was: Any, now: Any, at: str, out: list[str]) -> None:
    if type(was) is dict and type(now) is dict and list(was) == list(now):
        for key in was:
            _changed(was[key], now[key], f"{at}/{key.replace('~', '~0').replace('/', '~1')}", out)
    elif type(was) is list and type(now) is list and len(was) == len(now):
        for i, (a, b) in enumerate(zip(was, now, strict=True)):
            _changed(a, b, f"{at}/{i}", out)
    elif type(was) is not type(now) or (was != now and not _nan(was)):  # NaN stays NaN
        out.append(at)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
