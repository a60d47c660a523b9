"""``oarlock receipts list|show|reconcile`` and ``oarlock audit verify|checkpoint|keygen``.

``audit verify`` exits 0 when the ledger and every checkpoint check out and 1 at the
first bad entry, which it names; ``receipts reconcile`` appends a record and never edits
the Uncertain receipt it resolves."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from oarlock.cli import EXIT_INVALID, EXIT_OK
from oarlock.cli._runs import Command, refused, run_command
from oarlock.errors import OarlockError
from oarlock.formats._time import now_rfc3339
from oarlock.governance._ledger import (
    Checkpoint,
    generate_key,
    load_private_key,
    load_public_key,
    public_key_pem,
    save_private_key,
    sign_checkpoint,
    verify_chain,
)
from oarlock.governance._owner import owner_alive
from oarlock.governance._records import Reconciliation, StoredReceipt, run_uuid
from oarlock.governance._sanitize import sanitize
from oarlock.store._base import RunStore

__all__ = ["dispatch"]



def _effect(receipt: dict[str, Any]) -> str:
    effect = receipt.get("effect")
    if not effect:
        return "-"
    ref = effect.get("externalReference")
    return f"{effect.get('kind')}" + (f" {ref}" if ref else "")


def _row(item: StoredReceipt) -> dict[str, Any]:
    inv, rec = item.invocation, item.receipt
    return {
        "invocationId": rec["invocationId"],
        "status": rec["status"],
        "tool": inv["toolId"],
        "runId": inv["runId"],
        "finishedAt": rec.get("finishedAt"),
        "effect": rec.get("effect"),
        "error": rec.get("error"),
        "reconciled": [r.outcome for r in item.reconciliations],
    }


async def _open(args: argparse.Namespace, store: RunStore) -> int:
    claims = await store.governance().open_claims()
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in claims], indent=2))
    elif not claims:
        print("no open claims")
    for c in [] if args.json else claims:
        alive = owner_alive(c.owner)
        state = {True: "running", False: "owner gone", None: "owner on another host"}[alive]
        since = f"since {c.claimed_at} ({state})"
        print(f"{c.invocation_id}  {c.tool_id:<20} {c.idempotency_key}  {since}")
    return EXIT_OK


async def _list(args: argparse.Namespace, store: RunStore) -> int:
    if args.open:
        return await _open(args, store)
    run = None if args.run is None else run_uuid(args.run)
    items = await store.governance().receipts(run_id=run, status=args.status, limit=args.limit)
    if args.json:
        print(json.dumps([_row(i) for i in items], indent=2, ensure_ascii=False))
        return EXIT_OK
    if not items:
        print("no receipts")
        return EXIT_OK
    for item in items:
        r = _row(item)
        status = r["status"] + (f" (reconciled: {r['reconciled'][-1]})" if r["reconciled"] else "")
        error = item.receipt.get("error") or {}
        detail = error.get("code") or _effect(item.receipt)
        print(f"{r['invocationId']}  {status:<12} {r['tool']:<20} {detail}")
    return EXIT_OK


async def _show(args: argparse.Namespace, store: RunStore) -> int:
    gov = store.governance()
    invocation, receipt = await gov.load(args.invocation_id)
    notes = await gov.reconciliations(args.invocation_id)
    result = None
    if receipt is not None and "resultRef" in receipt:
        result = (await gov.artifact(receipt["resultRef"])).decode("utf-8", "replace")
    if args.json:
        print(
            json.dumps(
                {
                    "invocation": invocation,
                    "receipt": receipt,
                    "reconciliations": [n.to_json() for n in notes],
                    "result": result,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return EXIT_OK
    decision = invocation["policyDecision"]
    lines = [
        f"invocation {invocation['invocationId']}",
        f"  tool       {invocation['toolId']} ({invocation['sideEffectClass']})",
        f"  run        {invocation['runId']}  step {invocation['stepId']}",
        f"  key        {invocation['idempotencyKey']}",
        f"  arguments  {json.dumps(invocation['arguments'], ensure_ascii=False)}",
        f"  policy     {decision['effect']} ({decision.get('ruleId') or 'default'})",
        f"  approval   {invocation.get('approvalId', '-')}",
    ]
    if receipt is None:
        lines.append("  receipt    none yet (running, or cut off by a crash)")
    else:
        lines += [
            f"  status     {receipt['status']}",
            f"  effect     {_effect(receipt)}",
            f"  finished   {receipt.get('finishedAt', '-')}",
            f"  hash       {receipt['receiptHash']}",
        ]
        if "error" in receipt:
            lines.append(
                f"  error      {receipt['error'].get('code')}: {receipt['error'].get('message')}"
            )
    lines += [f"  reconciled {n.outcome} by {n.by} at {n.at}: {n.evidence}" for n in notes]
    if result is not None:
        lines += ["  result", *("    " + line for line in sanitize(result).splitlines())]
    print("\n".join(lines))
    return EXIT_OK


async def _reconcile(args: argparse.Namespace, store: RunStore) -> int:
    supersedes = None
    if args.supersede:
        earlier = await store.governance().reconciliations(args.invocation_id)
        if not earlier:
            raise OarlockError(
                f"invocation {args.invocation_id} has no reconciliation to supersede",
                code="nothing_to_supersede",
            )
        supersedes = earlier[-1].reconciliation_id
    record = Reconciliation(
        reconciliation_id=str(uuid.uuid4()),
        invocation_id=args.invocation_id,
        outcome=args.outcome,
        evidence=args.evidence,
        by=args.principal,
        at=now_rfc3339(),
        supersedes=supersedes,
    )
    await store.governance().reconcile(record)
    note = f" (supersedes {supersedes})" if supersedes else ""
    print(f"invocation {args.invocation_id}: reconciled as {args.outcome}{note}")
    return EXIT_OK


async def _verify(args: argparse.Namespace, store: RunStore) -> int:
    gov = store.governance()
    keys = [load_public_key(k) for k in args.public_key or []]
    checkpoints = await gov.checkpoints() + [_read_checkpoint(f) for f in args.checkpoint or []]
    entries = await gov.ledger()
    report = verify_chain(entries, checkpoints, keys)
    if args.approvers:
        from oarlock.governance._approvers import TrustedApprovers, approval_problems

        unsigned = approval_problems(entries, TrustedApprovers.from_file(args.approvers))
        if unsigned:
            everything = (*report.problems, *unsigned)
            problems = tuple(sorted(everything, key=lambda p: (p.seq is None, p.seq or 0)))
            report = dataclasses.replace(report, ok=False, problems=problems)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "entries": report.entries,
                    "headSeq": report.head_seq,
                    "headHash": report.head_hash,
                    "checkpointsChecked": report.checkpoints_checked,
                    "signaturesVerified": report.signatures_verified,
                    "problems": [
                        {"seq": p.seq, "code": p.code, "message": p.message}
                        for p in report.problems
                    ],
                },
                indent=2,
            )
        )
    elif report.ok:
        signed = (
            ""
            if report.signatures_verified or not report.checkpoints_checked
            else (" (signatures not checked: give --public-key)")
        )
        print(
            f"ledger ok: {report.entries} entries, head {report.head_seq} {report.head_hash}; "
            f"{report.checkpoints_checked} checkpoint(s){signed}"
        )
    else:
        for problem in report.problems:
            print(f"ledger: {problem.message} ({problem.code})", file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_INVALID


def _read_checkpoint(path: str) -> Checkpoint:
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise OarlockError(f"cannot read checkpoint {path}: {exc.strerror}", code="usage") from None
    except ValueError as exc:
        raise OarlockError(f"checkpoint {path} is not JSON: {exc}", code="usage") from None
    if not isinstance(data, dict):
        raise OarlockError(f"checkpoint {path} is not a JSON object", code="usage")
    return Checkpoint.from_json(data)


async def _checkpoint(args: argparse.Namespace, store: RunStore) -> int:
    gov = store.governance()
    entries = await gov.ledger()
    if not entries:
        raise OarlockError("the ledger is empty: nothing to sign", code="usage")
    checkpoint = sign_checkpoint(entries[-1], load_private_key(args.key), now_rfc3339())
    await gov.add_checkpoint(checkpoint)
    text = json.dumps(checkpoint.to_json(), indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", "utf-8")
    print(text)
    return EXIT_OK


_COMMANDS: dict[str, Command] = {
    "list": _list,
    "show": _show,
    "reconcile": _reconcile,
    "verify": _verify,
    "checkpoint": _checkpoint,
}


def _keygen(args: argparse.Namespace) -> int:
    key = generate_key()
    save_private_key(key, args.path)
    print(public_key_pem(key), end="")
    return EXIT_OK


def dispatch(args: argparse.Namespace) -> int:
    if args.action == "keygen":
        try:
            return _keygen(args)
        except OarlockError as exc:
            return refused(exc)
    return run_command(args, _COMMANDS[args.action])
