"""The ``oarlock`` command end to end against a PostgreSQL URL: every command of the run
and governance families, the password of the URL never printed (the server trusts the
tests' connections, so a URL may carry any password), and commands that only read never
making oarlock's tables in a database that has none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from test_cli_runs import CALL, FINAL, Cli

import pgtest

SECRET = "hunter2-not-for-eyes"


def with_password(url: str) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username}:{SECRET}@{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


class PgCli(Cli):
    """:class:`Cli` on a PostgreSQL database; every output is checked for the password."""

    def __init__(self, tmp: Path, url: str) -> None:
        super().__init__(tmp)
        self.db = with_password(url)  # type: ignore[assignment]
        self.outputs: list[str] = []

    def __call__(self, *args: str, stdin: str | None = None, db: bool = True) -> Any:
        out = super().__call__(*args, stdin=stdin, db=db)
        self.outputs += [out.stdout, out.stderr]
        assert SECRET not in out.stdout + out.stderr, (args, out.stdout, out.stderr)
        return out


@pytest.fixture
def pg(tmp_path: Path) -> PgCli:
    return PgCli(tmp_path, pgtest.new_database())


def tables(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        return int(row.fetchone()[0])  # type: ignore[index]


READ_ONLY = [
    ("runs", "list"),
    ("runs", "show", "r1"),
    ("runs", "export", "r1"),
    ("approve", "r1", "c1"),
    ("deny", "r1", "c1", "--reason", "no"),
    ("resume", "r1"),
    ("cancel", "r1"),
    ("receipts", "list"),
    ("receipts", "show", "i1"),
    ("audit", "verify"),
]


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: " ".join(a[:2]))
def test_commands_other_than_run_make_no_tables(tmp_path: Path, args: tuple[str, ...]) -> None:
    url = pgtest.empty_database()
    cli = PgCli(tmp_path, url)
    out = cli(*args)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "no oarlock database at postgresql://postgres:[redacted]@" in out.stderr
    assert out.stderr.count("\n") == 1  # one line, no traceback
    assert tables(url) == 0


def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    cli = PgCli(tmp_path, "postgresql://postgres@127.0.0.1:1/nowhere")
    out = cli("runs", "list")
    assert out.returncode == 1
    assert "cannot reach PostgreSQL at postgresql://postgres:[redacted]@127.0.0.1:1" in out.stderr
    assert out.stderr.count("\n") == 1


def test_every_command_against_a_postgresql_url(pg: PgCli, tmp_path: Path) -> None:
    # a run left waiting, listed and shown
    out = pg("demo")
    assert out.returncode == 0 and "left waiting" in out.stdout, out.stderr
    assert "postgresql://postgres:[redacted]@" in out.stdout
    (waiting,) = pg.runs("--status", "waiting_approval")
    run_id = waiting["id"]
    assert run_id in pg.ok("runs", "list")
    shown = pg.ok("runs", "show", run_id)
    assert "waiting_approval" in shown and "issue_refund" in shown
    exported = tmp_path / "run.json"
    exported.write_text(pg.ok("runs", "export", run_id))
    assert pg.ok("validate", str(exported)).strip().endswith("1 valid, 0 invalid")

    # refused decisions change nothing; an approval completes it
    assert pg("respond", run_id, CALL, "no").returncode == 1
    assert pg("approve", run_id, "no-such-call").returncode == 1
    done = pg.ok("approve", run_id[:8], CALL)  # a run named by the start of its id
    assert FINAL in done
    assert pg.ok("runs", "show", run_id[:8]) == pg.ok("runs", "show", run_id)
    followed = pg.ok("runs", "show", run_id[:8], "--follow")  # it has ended: shown, done
    assert followed.strip() == pg.ok("runs", "show", run_id).strip()
    assert pg.export(run_id)["decisions"][0]["decision"] == "approved"
    assert pg("approve", run_id, CALL).returncode == 1  # a second decision
    (completed,) = pg.runs("--status", "completed")
    assert completed["id"] == run_id

    # receipts, reconciliation of a receipt that is not Uncertain, the ledger
    receipts = json.loads(pg.ok("receipts", "list", "--json"))
    assert {r["tool"] for r in receipts} >= {"issue_refund", "lookup_order"}
    refund = next(r for r in receipts if r["tool"] == "issue_refund")
    assert json.loads(pg.ok("receipts", "show", refund["invocationId"], "--json"))["receipt"]
    refused = pg("receipts", "reconcile", refund["invocationId"], "--as", "succeeded",
                 "--evidence", "bank")  # fmt: skip
    assert refused.returncode == 1 and "not Uncertain" in refused.stderr
    assert json.loads(pg.ok("receipts", "list", "--open", "--json")) == []
    key = tmp_path / "ledger.pem"
    pub = tmp_path / "ledger.pub"
    pub.write_text(pg.ok("audit", "keygen", str(key)))
    checkpoint = json.loads(pg.ok("audit", "checkpoint", "--key", str(key)))
    assert checkpoint["chain"] == "demo"  # the demo agent's tenant
    verified = json.loads(pg.ok("audit", "verify", "--public-key", str(pub), "--json"))
    assert verified["ok"] and verified["checkpointsChecked"] == 1
    assert [c["chain"] for c in verified["chains"]] == ["demo"]

    # replay, deny, cancel and resume
    assert "no divergence" in pg.ok("replay", run_id)
    pg("demo")
    second = next(r["id"] for r in pg.runs("--status", "waiting_approval"))
    denied = pg.ok("deny", second, CALL, "--reason", "not today")
    assert f"{CALL}: denied" in denied
    pg("demo")
    third = next(r["id"] for r in pg.runs("--status", "waiting_approval"))
    assert "cancelled" in pg.ok("cancel", third)
    resumed = pg("resume", third)
    assert resumed.returncode == 3 and "cancelled" in resumed.stdout  # left as it was
    assert pg.export(third)["status"] == "cancelled"
    assert pg("runs", "show", "no-such-run").returncode == 1


def test_run_tags_and_detach(pg: PgCli) -> None:
    from oarlock.demo import AGENT_FILE

    out = pg("run", str(AGENT_FILE), "Where is order A-1001?", "--tag", "team=desk")
    assert out.returncode == 0, out.stderr
    assert [r["tags"] for r in pg.runs("--tag", "team=desk")] == [{"team": "desk"}]
    submitted = pg.ok("run", str(AGENT_FILE), "Order A-1001 arrived broken.", "--detach")
    assert "submitted to queue default" in submitted and "oarlock worker" in submitted
    assert SECRET not in submitted
    [queued] = [r for r in pg.runs() if r["status"] == "running"]
    assert queued["holder"] is None  # runnable: waiting for a worker, or a resume
    resumed = pg("resume", queued["id"])
    assert resumed.returncode == 0, resumed.stderr
    assert SECRET not in resumed.stdout + resumed.stderr
    assert {r["status"] for r in pg.runs()} == {"waiting_approval"}  # the demo asks for one
