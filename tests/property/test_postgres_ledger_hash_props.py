"""The ledger entry hash as PostgreSQL computes it (``oarlock_entry_hash``, migration 0003,
which the one-statement claim and receipt use) is byte for byte the one Python computes
(``entry_hash_canonical``, itself held to ``entry_hash`` by test_ledger_props.py) whenever
the time, kind and previous hash are their own JSON strings and the seq a safe integer;
otherwise it is NULL and the store writes the entry in Python (the general JCS form)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pgtest
from oarlock.formats._jcs import canonicalize
from oarlock.governance._ledger import (
    LEDGER_ENTRY_KINDS,
    _plain,
    entry_hash,
    entry_hash_canonical,
)
from oarlock.store._postgres_base import pg_queries

# text PostgreSQL can hold: no NUL, no lone surrogate
_TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
_PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)


def _texts(max_size: int) -> st.SearchStrategy[str]:
    return st.text(_PRINTABLE, max_size=max_size) | st.text(_TEXT, max_size=max_size)


@pytest.fixture(scope="module")
def conn() -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pgtest.new_database(lasting=True), autocommit=True) as connection:
        yield connection


def sql_hash(conn: psycopg.Connection[Any], seq: int, kind: str, at: str, body: str,
             prev: str) -> str | None:  # fmt: skip
    params = {"seq": seq, "kind": kind, "at": at, "body": body, "prev": prev}
    row = conn.execute(pg_queries("postgres_governance.sql")["entry_hash"], params).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(
    seq=st.integers(1, 2**53 - 1) | st.integers(2**53, 2**63 - 1),
    kind=st.sampled_from(sorted(LEDGER_ENTRY_KINDS)) | _texts(6),
    at=st.sampled_from(["2026-01-01T00:00:00.000000Z", "2026-12-01T14:08:00+01:00"]) | _texts(30),
    prev=st.just("sha256:" + "0" * 64) | _texts(70),
    body=st.dictionaries(
        st.text(_TEXT, max_size=5),
        st.none()
        | st.booleans()
        | st.integers(-(2**53) + 1, 2**53 - 1)
        | st.text(_TEXT, max_size=8),
        max_size=5,
    ),
)
def test_the_database_hashes_an_entry_as_python_does_or_leaves_it_to_python(
    conn: psycopg.Connection[Any], seq: int, kind: str, at: str, prev: str,
    body: dict[str, Any],
) -> None:  # fmt: skip
    jcs = canonicalize(body)
    found = sql_hash(conn, seq, kind, at, jcs.decode("utf-8"), prev)
    if _plain(at) and _plain(kind) and _plain(prev) and seq < 2**53:
        assert found == entry_hash_canonical(seq, kind, at, jcs, prev)
        assert found == entry_hash(seq, kind, at, body, prev)
    else:
        assert found is None


def test_the_fallback_cases_are_left_to_python(conn: psycopg.Connection[Any]) -> None:
    prev = "sha256:" + "0" * 64
    at = "2026-01-01T00:00:00Z"
    assert sql_hash(conn, 1, "receipt", at, "{}", prev) == entry_hash(1, "receipt", at, {}, prev)
    for odd in ('a"b', "a\\b", "é", "a\nb", "\x7f", "a\x1fb"):
        assert sql_hash(conn, 1, "receipt", odd, "{}", prev) is None
        assert sql_hash(conn, 1, odd, at, "{}", prev) is None
        assert sql_hash(conn, 1, "receipt", at, "{}", odd) is None
    assert sql_hash(conn, 2**53, "receipt", at, "{}", prev) is None
    assert sql_hash(conn, 2**53 - 1, "receipt", at, "{}", prev) == entry_hash(
        2**53 - 1, "receipt", at, {}, prev
    )
