"""Registering configured secrets by where they are configured: header and variable names
that say they are secret, Authorization values with their scheme, URL passwords (also
percent-encoded) and secret query parameters; what is not secret stays readable."""

from __future__ import annotations

import pytest

from oarlock._secrets import looks_secret, redact, register_named, register_url


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "Proxy-Authorization",
        "X-Api-Key",
        "api-key",
        "Cookie",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "x-goog-session",
        "PGPASSWORD",
        "HF_TOKEN",
        "x-apikey",
    ],
)
def test_names_that_say_secret(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize(
    "name", ["Accept", "X-Tenant", "NOTES_DIR", "LANG", "User-Agent", "GIT_AUTHOR_NAME", "KEYBOARD"]
)
def test_names_that_do_not(name: str) -> None:
    assert not looks_secret(name)


def test_an_authorization_value_is_registered_whole_and_without_its_scheme() -> None:
    register_named("Authorization", "Token tk-4Lm9Qs2Wx7Ez")
    register_named("X-Tenant", "tenant-acme-europe-1")
    out = redact("sent 'Token tk-4Lm9Qs2Wx7Ez'; the token tk-4Lm9Qs2Wx7Ez; tenant-acme-europe-1")
    assert "tk-4Lm9Qs2Wx7Ez" not in out
    assert "tenant-acme-europe-1" in out


def test_a_url_password_is_registered_as_given_and_decoded() -> None:
    register_url("https://svc:p%40ss-W0rd-8xYz@proxy.example.com/v1?token=qt-2Hj6Kd8Lp3&region=eu")
    out = redact("p%40ss-W0rd-8xYz | p@ss-W0rd-8xYz | qt-2Hj6Kd8Lp3 | region=eu")
    assert out == "[redacted] | [redacted] | [redacted] | region=eu"


@pytest.mark.parametrize("url", [None, "", "http://[::1", "not a url", "https://host/path"])
def test_urls_without_secrets_or_that_do_not_parse_register_nothing(url: str | None) -> None:
    before = redact("plain words stay as they are")
    register_url(url)
    assert redact("plain words stay as they are") == before == "plain words stay as they are"
