"""The PostgreSQL ledger: one hash chain per tenant, tampered with through SQL and no
oarlock code (rows edited, deleted, swapped, truncated, rewritten consistently, the head
row edited or deleted), and what the verifier makes of each chain. A problem in one
tenant's chain never shows in another's.

Each test builds two chains through the governed executor: ``acme`` (three ``charge``
calls: approval, invocation and receipt each, nine entries) and ``globex`` (one
``lookup``: invocation and receipt)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import executor_driver as drv
import psycopg
import pytest

import pgtest
from oarlock.formats._jcs import canonicalize
from oarlock.formats._time import now_rfc3339
from oarlock.governance import GovernedExecutor, generate_key, sign_checkpoint
from oarlock.governance._ledger import (
    GENESIS_HASH,
    Checkpoint,
    LedgerEntry,
    VerifyReport,
    entry_hash,
    public_key_pem,
    save_private_key,
    verify_chains,
)
from oarlock.store._postgres import PostgresStore

KEY = generate_key()


async def _build(url: str, effects: Path) -> None:
    async with PostgresStore(url) as runs:
        executor = GovernedExecutor(runs.governance(), policy=drv.POLICY)
        charge, lookup = drv.make_charge(effects), drv.make_lookup(effects)
        for turn, (order, amount) in enumerate((("A-1", 25), ("A-2", 40), ("A-3", 55)), 1):
            args = {"order_id": order, "amount": amount}
            part = await executor.execute(
                charge, drv.make_call("charge", args, f"c{turn}"), args,
                drv.context(turn=turn, tenant="acme"),
            )  # fmt: skip
            assert not part.is_error, part.content
        args = {"order_id": "A-1"}
        part = await executor.execute(
            lookup, drv.make_call("lookup", args, "g1"), args,
            drv.context(run_id="run-globex", tenant="globex"),
        )  # fmt: skip
        assert not part.is_error, part.content


def read(url: str) -> tuple[dict[str, list[LedgerEntry]], list[Checkpoint]]:
    async def go() -> tuple[dict[str, list[LedgerEntry]], list[Checkpoint]]:
        async with PostgresStore(url) as runs:
            gov = runs.governance()
            chains = {name: await gov.ledger(name) for name in await gov.chains()}
            return chains, await gov.checkpoints()

    return asyncio.run(go())


def verify(url: str, extra: Sequence[Checkpoint] = ()) -> dict[str, VerifyReport]:
    chains, stored = read(url)
    return verify_chains(chains, [*stored, *extra], [KEY.public_key()])


def codes(report: VerifyReport) -> list[tuple[int | None, str]]:
    return [(p.seq, p.code) for p in report.problems]


def sql(url: str, *statements: str, params: Any = None) -> None:
    """Statements as a writer of the database would run them, foreign keys off."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for statement in statements:
            conn.execute(statement, params)


def rows(url: str, chain: str) -> list[dict[str, Any]]:
    from psycopg.rows import dict_row

    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT seq, kind, at, body, prev_hash, entry_hash FROM ledger "
            "WHERE chain = %s ORDER BY seq",
            (chain,),
        ).fetchall()


def rewrite(url: str, chain: str, changed: dict[int, dict[str, Any]]) -> None:
    """Replace the bodies of ``changed`` seqs and recompute every hash from the first of
    them: what a forger who knows the format does."""
    prev = GENESIS_HASH
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for row in rows(url, chain):
            body = changed.get(row["seq"], json.loads(row["body"]))
            digest = entry_hash(row["seq"], row["kind"], row["at"], body, prev)
            conn.execute(
                "UPDATE ledger SET body = %s, prev_hash = %s, entry_hash = %s "
                "WHERE chain = %s AND seq = %s",
                (canonicalize(body).decode(), prev, digest, chain, row["seq"]),
            )
            prev = digest


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = pgtest.new_database()
    asyncio.run(_build(url, tmp_path / "effects"))
    reports = verify(url)
    assert sorted(reports) == ["acme", "globex"]
    assert [r.entries for r in reports.values()] == [9, 2]
    assert all(r.ok for r in reports.values())
    return url


def test_each_tenant_has_its_own_chain(url: str) -> None:
    chains, _ = read(url)
    assert [e.kind for e in chains["globex"]] == ["invocation", "receipt"]
    assert [e.seq for e in chains["acme"]] == list(range(1, 10))
    assert chains["globex"][0].prev_hash == chains["acme"][0].prev_hash == GENESIS_HASH
    assert all(e.body["scope"]["tenantId"] == "acme" for e in chains["acme"] if
               e.kind == "invocation")  # fmt: skip


def test_an_edited_body_is_a_hash_mismatch_in_its_chain_only(url: str) -> None:
    sql(url, "UPDATE ledger SET body = replace(body, '\"amount\":40', '\"amount\":4000') "
             "WHERE chain = 'acme' AND seq = 5")  # fmt: skip
    reports = verify(url)
    assert codes(reports["acme"]) == [(5, "hash_mismatch")]
    assert reports["globex"].ok


@pytest.mark.parametrize("seq", [1, 5, 8])
def test_a_deleted_row_is_a_seq_gap(url: str, seq: int) -> None:
    sql(url, "DELETE FROM ledger WHERE chain = 'acme' AND seq = %s", params=(seq,))
    assert codes(verify(url)["acme"])[0] == (seq, "seq_gap")


def test_swapped_rows_are_found(url: str) -> None:
    a, b = rows(url, "acme")[3], rows(url, "acme")[6]
    sql(url,
        "UPDATE ledger SET seq = 1000 WHERE chain = 'acme' AND seq = 4",
        "UPDATE ledger SET seq = 4 WHERE chain = 'acme' AND seq = 7",
        "UPDATE ledger SET seq = 7 WHERE chain = 'acme' AND seq = 1000")  # fmt: skip
    assert (a["kind"], b["kind"]) == ("approval", "approval")
    problems = codes(verify(url)["acme"])
    assert problems and problems[0][0] == 4


def test_an_entry_moved_to_another_chain_is_found_in_both(url: str) -> None:
    sql(url, "UPDATE ledger SET chain = 'globex', seq = 3 WHERE chain = 'acme' AND seq = 9")
    reports = verify(url)
    assert codes(reports["globex"]) == [(3, "hash_mismatch")]  # its hash covers its seq
    assert reports["acme"].ok and reports["acme"].head_seq == 8  # a tail: see checkpoints


def test_truncation_passes_the_chain_and_fails_a_checkpoint(url: str) -> None:
    chains, _ = read(url)
    checkpoint = sign_checkpoint(chains["acme"][-1], KEY, now_rfc3339(), chain="acme")
    sql(url, "DELETE FROM ledger WHERE chain = 'acme' AND seq >= 7")
    assert verify(url)["acme"].ok  # the chain alone cannot tell
    assert [c for _, c in codes(verify(url, [checkpoint])["acme"])] == ["truncated"]
    # a whole chain removed: its checkpoint still names it
    sql(url, "DELETE FROM ledger WHERE chain = 'acme'", "DELETE FROM ledger_heads")
    assert [c for _, c in codes(verify(url, [checkpoint])["acme"])] == ["truncated"]


def test_a_consistent_rewrite_passes_the_chain_and_fails_a_checkpoint(url: str) -> None:
    chains, _ = read(url)
    checkpoint = sign_checkpoint(chains["acme"][5], KEY, now_rfc3339(), chain="acme")
    body = json.loads(rows(url, "acme")[4]["body"])
    body["arguments"]["amount"] = 4000
    rewrite(url, "acme", {5: body})
    assert verify(url)["acme"].ok
    assert codes(verify(url, [checkpoint])["acme"]) == [(6, "checkpoint_mismatch")]
    # a checkpoint of another chain says nothing about this one
    other = sign_checkpoint(chains["acme"][5], KEY, now_rfc3339(), chain="globex")
    assert codes(verify(url, [other])["globex"]) == [(None, "truncated")]


def test_a_head_row_edited_breaks_the_next_entry_and_one_deleted_is_remade(
    url: str, tmp_path: Path
) -> None:
    sql(url, "DELETE FROM ledger_heads WHERE chain = 'globex'")
    sql(url, "UPDATE ledger_heads SET entry_hash = %s WHERE chain = 'acme'",
        params=("sha256:" + "e" * 64,))  # fmt: skip

    async def more() -> None:
        async with PostgresStore(url) as runs:
            executor = GovernedExecutor(runs.governance(), policy=drv.POLICY)
            lookup = drv.make_lookup(tmp_path / "effects")
            for tenant in ("acme", "globex"):
                args = {"order_id": "A-9"}
                part = await executor.execute(
                    lookup, drv.make_call("lookup", args, f"x-{tenant}"), args,
                    drv.context(run_id=f"run-more-{tenant}", tenant=tenant),
                )  # fmt: skip
                assert not part.is_error, part.content

    asyncio.run(more())
    reports = verify(url)
    assert codes(reports["acme"]) == [(10, "chain_broken")]
    assert reports["globex"].ok and reports["globex"].head_seq == 4  # remade from its tail


def test_audit_verify_names_the_chain_of_each_problem(url: str, tmp_path: Path) -> None:
    key = tmp_path / "ledger.pem"
    save_private_key(KEY, key)
    pub = tmp_path / "ledger.pub"
    pub.write_text(public_key_pem(KEY))
    env = {k: v for k, v in os.environ.items() if k != "OARLOCK_DB"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oarlock.cli", "--db", url, *args],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip

    out = cli("audit", "checkpoint", "--key", str(key), "--out", str(tmp_path / "cp.json"))
    assert out.returncode == 0, out.stderr
    signed = json.loads(out.stdout)
    assert sorted(c["chain"] for c in signed) == ["acme", "globex"]
    assert all(c["type"] == "oarlock-ledger-checkpoint/2" for c in signed)
    ok = cli("audit", "verify", "--public-key", str(pub))
    assert ok.returncode == 0 and ok.stdout.count("ledger ok: chain") == 2, ok.stdout
    only = cli("audit", "checkpoint", "--key", str(key), "--chain", "globex")
    assert only.returncode == 0 and json.loads(only.stdout)["chain"] == "globex"

    sql(url, "DELETE FROM ledger WHERE chain = 'acme' AND seq = 9",
        "UPDATE ledger SET at = 'x' WHERE chain = 'globex' AND seq = 1")  # fmt: skip
    bad = cli("audit", "verify", "--public-key", str(pub), "--checkpoint",
              str(tmp_path / "cp.json"), "--json")  # fmt: skip
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    found = {(p["chain"], p["code"]) for p in report["problems"]}
    assert ("acme", "truncated") in found and ("globex", "hash_mismatch") in found
    text = cli("audit", "verify")
    assert "ledger chain globex: entry 1" in text.stderr, text.stderr
