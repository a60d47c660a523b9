"""``oarlock receipts`` and ``oarlock audit`` end to end, on the demo's database."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.acceptance.test_cli_runs import Cli

from oarlock.formats._jcs import digest
from oarlock.governance._ledger import entry_hash
from oarlock.store._sqlite_governance import unpack_body, unpack_hash


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    c = Cli(tmp_path)
    c.ok("demo", "--yes")
    return c


def receipts(cli: Cli, *args: str) -> list[dict[str, Any]]:
    found = json.loads(cli.ok("receipts", "list", "--json", *args))
    assert isinstance(found, list)
    return found


def test_receipts_list_and_show_give_status_effect_and_result(cli: Cli) -> None:
    items = receipts(cli)
    assert sorted(i["tool"] for i in items) == ["issue_refund", "lookup_order", "refund_policy"]
    refund = next(i for i in items if i["tool"] == "issue_refund")
    assert refund["status"] == "Succeeded" and refund["effect"]["kind"] == "refund"
    assert refund["effect"]["externalReference"].startswith("rf_")
    shown = json.loads(cli.ok("receipts", "show", refund["invocationId"], "--json"))
    assert shown["invocation"]["toolId"] == "issue_refund"
    assert shown["invocation"]["sideEffectClass"] == "spend"
    assert json.loads(shown["result"])["refund_id"] == refund["effect"]["externalReference"]
    text = cli.ok("receipts", "show", refund["invocationId"])
    assert "Succeeded" in text and "refund rf_" in text and "approval" in text
    assert receipts(cli, "--status", "Failed") == []
    lines = cli.ok("receipts", "list").splitlines()
    assert len(lines) == 3 and any("issue_refund" in line for line in lines)


def test_a_second_demo_replays_the_refund_instead_of_paying_twice(cli: Cli) -> None:
    cli.ok("demo", "--yes")
    refunds = [i for i in receipts(cli) if i["tool"] == "issue_refund"]
    assert len(refunds) == 1  # keyed by order id: the second run got the first receipt


def test_show_of_an_unknown_invocation_fails(cli: Cli) -> None:
    out = cli("receipts", "show", str(uuid.uuid4()))
    assert out.returncode == 1 and "no invocation" in out.stderr


def test_reconcile_refuses_a_receipt_that_is_not_uncertain(cli: Cli) -> None:
    refund = next(i for i in receipts(cli) if i["tool"] == "issue_refund")
    out = cli(
        "receipts", "reconcile", refund["invocationId"], "--as", "succeeded", "--evidence", "bank"
    )
    assert out.returncode == 1 and "not Uncertain" in out.stderr


async def claim_a_lookup(gov: Any, key: str, owner: str) -> tuple[dict[str, Any], Any]:
    """A new invocation of the demo's lookup under ``key``, claimed by ``owner`` and left
    without a receipt, as a process cut off after its claim leaves it."""
    from oarlock.governance import Claim

    (item,) = [i for i in await gov.receipts() if i.invocation["toolId"] == "lookup_order"]
    inv = dict(item.invocation)
    inv |= {"invocationId": str(uuid.uuid4()), "idempotencyKey": key}
    claim = Claim(
        "demo",
        inv["toolId"],
        key,
        inv["invocationId"],
        inv["argumentsHash"],
        owner,
        inv["policyDecision"]["evaluatedAt"],
        0,
    )
    await gov.begin(inv, claim, approval_id=None, grant=None, at=claim.claimed_at)
    return inv, claim


def test_reconcile_appends_to_an_uncertain_receipt(cli: Cli) -> None:
    # make one Uncertain receipt through the store, as a crash recovery would
    import asyncio

    from oarlock.store import SQLiteStore

    async def uncertain() -> str:
        async with SQLiteStore(cli.db) as store:
            gov = store.governance()
            inv, claim = await claim_a_lookup(gov, "k-uncertain", "h:1:1")
            body = {
                "invocationId": inv["invocationId"],
                "status": "Uncertain",
                "startedAt": claim.claimed_at,
                "error": {"code": "interrupted", "message": "crash"},
            }
            body["receiptHash"] = digest(body)
            await gov.finish(body, result=None, at=claim.claimed_at)
            return str(inv["invocationId"])

    invocation_id = asyncio.run(uncertain())
    before = json.loads(cli.ok("receipts", "show", invocation_id, "--json"))
    out = cli.ok(
        "receipts",
        "reconcile",
        invocation_id,
        "--as",
        "not-applied",
        "--evidence",
        "no charge in the bank statement",
        "--by",
        "ops:ana",
    )
    assert "reconciled as not-applied" in out
    after = json.loads(cli.ok("receipts", "show", invocation_id, "--json"))
    assert after["receipt"] == before["receipt"]  # never edited
    (note,) = after["reconciliations"]
    assert note["outcome"] == "not-applied" and note["by"] == "ops:ana"
    listed = next(i for i in receipts(cli, "--status", "Uncertain"))
    assert listed["reconciled"] == ["not-applied"]
    assert cli("audit", "verify").returncode == 0

    # a contradicting second statement is refused; --supersede records one that says so
    args = ("receipts", "reconcile", invocation_id, "--as", "succeeded", "--evidence", "bank")
    refused = cli(*args)
    assert refused.returncode == 1 and "already reconciled as not-applied" in refused.stderr
    assert json.loads(cli.ok("receipts", "show", invocation_id, "--json")) == after
    out = cli.ok(*args, "--supersede")
    assert f"supersedes {note['reconciliationId']}" in out
    final = json.loads(cli.ok("receipts", "show", invocation_id, "--json"))
    assert [n["outcome"] for n in final["reconciliations"]] == ["not-applied", "succeeded"]
    assert final["reconciliations"][1]["supersedes"] == note["reconciliationId"]
    assert cli("audit", "verify").returncode == 0


def test_audit_verify_checkpoint_and_tamper_detection(cli: Cli, tmp_path: Path) -> None:
    out = cli.ok("audit", "verify")
    assert out.startswith("ledger ok: ")
    key = tmp_path / "ledger.pem"
    public = cli.ok("audit", "keygen", str(key))
    assert public.startswith("-----BEGIN PUBLIC KEY-----")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    pub = tmp_path / "ledger.pub"
    pub.write_text(public)
    checkpoint = json.loads(cli.ok("audit", "checkpoint", "--key", str(key)))
    report = json.loads(cli.ok("audit", "verify", "--public-key", str(pub), "--json"))
    assert report["ok"] and report["checkpointsChecked"] == 1 and report["signaturesVerified"]
    assert report["headSeq"] == checkpoint["seq"]

    # truncate the tail: caught by the signed checkpoint
    with sqlite3.connect(cli.db) as conn:
        conn.execute("DELETE FROM ledger WHERE seq = (SELECT MAX(seq) FROM ledger)")
    out = cli("audit", "verify", "--public-key", str(pub))
    assert out.returncode == 1 and "truncated" in out.stderr


def jcs_text(stored: str | bytes) -> str:
    """A stored ledger body as JCS text (stored as it is, or compressed)."""
    value = unpack_body(stored)
    return value.decode("utf-8") if isinstance(value, bytes) else value


def test_audit_verify_names_an_edited_entry(cli: Cli) -> None:
    with sqlite3.connect(cli.db) as conn:
        seq, body = conn.execute(
            "SELECT seq, body FROM ledger WHERE kind = 'invocation' ORDER BY seq LIMIT 1"
        ).fetchone()
        text = jcs_text(body)
        conn.execute(
            "UPDATE ledger SET body = ? WHERE seq = ?", (text.replace("A-1001", "A-1002"), seq)
        )
    out = cli("audit", "verify", "--json")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert report["problems"][0]["seq"] == seq and report["problems"][0]["code"] == "hash_mismatch"


def test_audit_verify_catches_a_rewritten_history_only_with_a_checkpoint(
    cli: Cli, tmp_path: Path
) -> None:
    key = tmp_path / "k.pem"
    (tmp_path / "k.pub").write_text(cli.ok("audit", "keygen", str(key)))
    kept = tmp_path / "checkpoint.json"
    cli.ok("audit", "checkpoint", "--key", str(key), "--out", str(kept))
    first = kept.read_text()
    again = cli("audit", "checkpoint", "--key", str(key), "--out", str(kept))
    assert again.returncode == 1 and "exists" in again.stderr  # never written over
    assert kept.read_text() == first
    cli.ok("audit", "checkpoint", "--key", str(key), "--out", str(tmp_path / "later.json"))
    with sqlite3.connect(cli.db) as conn:
        conn.execute("DELETE FROM checkpoints")  # the forger covers the tracks in the database
        rows = conn.execute(
            "SELECT seq, kind, at, body, prev_hash FROM ledger ORDER BY seq"
        ).fetchall()
        prev = None
        for seq, kind, at, body, prev_hash in rows:
            data = json.loads(jcs_text(body).replace("A-1001", "A-1002"))
            prev = unpack_hash(prev_hash) if prev is None else prev
            h = entry_hash(seq, kind, at, data, prev)
            conn.execute(
                "UPDATE ledger SET body = ?, prev_hash = ?, entry_hash = ? WHERE seq = ?",
                (json.dumps(data, separators=(",", ":")), prev, h, seq),
            )
            prev = h
    assert cli("audit", "verify").returncode == 0  # a consistent forgery needs a checkpoint
    out = cli("audit", "verify", "--public-key", str(tmp_path / "k.pub"), "--checkpoint", str(kept))
    assert out.returncode == 1 and "checkpoint_mismatch" in out.stderr


def test_approve_as_a_principal_with_an_expiry_that_has_passed(tmp_path: Path) -> None:
    import asyncio

    from oarlock.demo import AGENT_FILE
    from oarlock.store import SQLiteStore

    cli = Cli(tmp_path)
    cli.ok("run", str(AGENT_FILE), "Order A-1001 arrived broken. Please refund it.")
    (run,) = json.loads(cli.ok("runs", "list", "--json"))
    # an approval that lapses within a millisecond: the executor refuses it when the call
    # comes to run, later (in another process: the approval is signed by the user's key)
    cli.make_key("ops:ana")
    cli.ok(
        "approve", run["id"], "call_2_1", "--as", "ops:ana", "--expires-in", "0.001", "--no-resume"
    )
    time.sleep(0.01)
    cli.ok("resume", run["id"])
    refund = next(i for i in receipts(cli) if i["tool"] == "issue_refund")
    assert refund["status"] == "Denied" and refund["error"]["code"] == "approval_expired"

    async def approval() -> tuple[str, str | None]:
        async with SQLiteStore(cli.db) as store:
            found, _ = await store.governance().approval_for(run["id"], "call_2_1")
            return found.principal, found.expires_at

    principal, expires_at = asyncio.run(approval())
    assert principal == "ops:ana" and expires_at is not None


def test_receipts_list_open_shows_a_claim_without_a_receipt(cli: Cli) -> None:
    import asyncio
    import socket

    from oarlock.store import SQLiteStore

    async def cut_off() -> str:
        async with SQLiteStore(cli.db) as store:
            owner = f"{socket.gethostname()}:999999999:0"  # a process that is gone
            inv, _ = await claim_a_lookup(store.governance(), "k-open", owner)
            return str(inv["invocationId"])

    invocation_id = asyncio.run(cut_off())
    (listed,) = json.loads(cli.ok("receipts", "list", "--open", "--json"))
    assert listed["invocationId"] == invocation_id and listed["idempotencyKey"] == "k-open"
    assert listed["ownerState"] == "owner gone"
    text = cli.ok("receipts", "list", "--open")
    assert invocation_id in text and "owner gone" in text
