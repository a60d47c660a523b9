"""``oarlock receipts list|show|reconcile`` and ``oarlock audit verify|checkpoint|keygen``.

``audit verify`` checks every chain of the ledger (one per tenant on PostgreSQL, one named
``default`` on SQLite), each against the checkpoints of that chain, and exits 0 when all
check out, 1 when any does not, naming the chain of each problem and every bad entry;
``audit checkpoint`` signs the head of every chain (or of ``--chain``). ``receipts
reconcile`` appends a record and never edits the Uncertain receipt it resolves.

Every value from the database goes through the renderer (:mod:`oarlock._render`), and every
``--json`` output is :func:`~oarlock._render.dumps` of camelCase members."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import uuid
from typing import Any

from oarlock._render import block, dumps, line
from oarlock.cli import EXIT_INVALID, EXIT_OK, refused
from oarlock.cli._runs import Command, run_command
from oarlock.errors import OarlockError
from oarlock.formats._time import now_rfc3339
from oarlock.governance._ledger import (
    DEFAULT_CHAIN,
    Checkpoint,
    LedgerEntry,
    LedgerProblem,
    VerifyReport,
    generate_key,
    load_private_key,
    load_public_key,
    public_key_pem,
    save_private_key,
    sign_checkpoint,
    verify_chains,
)
from oarlock.governance._owner import owner_alive
from oarlock.governance._records import Claim, Reconciliation, run_uuid
from oarlock.store._base import RunStore

__all__ = ["dispatch"]


def _effect(receipt: dict[str, Any]) -> str:
    effect = receipt.get("effect")
    if not effect:
        return "-"
    ref = effect.get("externalReference")
    return line(effect.get("kind")) + (f" {line(ref)}" if ref else "")


def _sandbox(box: dict[str, Any]) -> str:
    """A receipt's ``usage.sandbox`` in one line: isolation, egress, how it ended."""
    ended = (
        f"signal {box['signal']}" if "signal" in box else f"exit status {box.get('exitCode', '-')}"
    )
    kept = f"{box.get('stdoutBytes', 0)}+{box.get('stderrBytes', 0)} bytes kept"
    dropped = f", {box['droppedBytes']} dropped" if box.get("droppedBytes") else ""
    return line(
        f"{box.get('isolation')}, egress {box.get('egressProfile')}, workspace "
        f"{box.get('workspaceId')}, {ended}, {kept}{dropped}"
    )


_OWNER = {True: "running", False: "owner gone", None: "owner on another host"}


def _claim_json(claim: Claim) -> dict[str, Any]:
    """An open claim as ``receipts list --open --json`` prints it."""
    return {
        "invocationId": claim.invocation_id,
        "tenantId": claim.tenant_id,
        "toolId": claim.tool_id,
        "idempotencyKey": claim.idempotency_key,
        "argumentsHash": claim.arguments_hash,
        "owner": claim.owner,
        "ownerState": _OWNER[owner_alive(claim.owner)],
        "claimedAt": claim.claimed_at,
        "leaseUntil": claim.lease_until,
    }


async def _open(args: argparse.Namespace, store: RunStore) -> int:
    claims = [_claim_json(c) for c in await store.governance().open_claims()]
    if args.json:
        print(dumps(claims))
        return EXIT_OK
    if not claims:
        print("no open claims")
    for c in claims:
        print(
            f"{line(c['invocationId'])}  {line(c['toolId']):<20} {line(c['idempotencyKey'])}  "
            f"since {line(c['claimedAt'])} ({c['ownerState']})"
        )
    return EXIT_OK


async def _list(args: argparse.Namespace, store: RunStore) -> int:
    if args.open:
        return await _open(args, store)
    run = None if args.run is None else run_uuid(args.run)
    items = await store.governance().receipts(run_id=run, status=args.status, limit=args.limit)
    if args.json:
        print(dumps([i.row() for i in items]))
        return EXIT_OK
    if not items:
        print("no receipts")
        return EXIT_OK
    for item in items:
        r = item.row()
        status = line(r["status"])
        if r["reconciled"]:
            status += f" (reconciled: {line(r['reconciled'][-1])})"
        error = item.receipt.get("error") or {}
        detail = line(error["code"]) if error.get("code") else _effect(item.receipt)
        print(f"{line(r['invocationId'])}  {status:<12} {line(r['tool']):<20} {detail}")
    return EXIT_OK


async def _show(args: argparse.Namespace, store: RunStore) -> int:
    gov = store.governance()
    invocation, receipt = await gov.load(args.invocation_id)
    notes = await gov.reconciliations(args.invocation_id)
    result = None
    if receipt is not None and "resultRef" in receipt:
        result = (await gov.artifact(receipt["resultRef"])).decode("utf-8", "replace")
    if args.json:
        from oarlock.formats._exported import exported

        print(
            dumps(
                {  # secrets redacted, and each record says where (its hashes cannot match)
                    "invocation": exported(invocation),
                    "receipt": None if receipt is None else exported(receipt),
                    "reconciliations": [n.to_json() for n in notes],
                    "result": result,
                }
            )
        )
        return EXIT_OK
    print("\n".join(_invocation_lines(invocation, receipt, notes, result)))
    return EXIT_OK


def _invocation_lines(
    invocation: dict[str, Any],
    receipt: dict[str, Any] | None,
    notes: list[Reconciliation],
    result: str | None,
) -> list[str]:
    decision = invocation["policyDecision"]
    arguments = json.dumps(invocation["arguments"], ensure_ascii=False)
    lines = [
        f"invocation {line(invocation['invocationId'])}",
        f"  tool       {line(invocation['toolId'])} ({line(invocation['sideEffectClass'])})",
        f"  run        {line(invocation['runId'])}  step {line(invocation['stepId'])}",
        f"  key        {line(invocation['idempotencyKey'])}",
        f"  arguments  {line(arguments)}",
        f"  policy     {line(decision['effect'])} ({line(decision.get('ruleId') or 'default')})",
        f"  approval   {line(invocation.get('approvalId', '-'))}",
    ]
    if receipt is None:
        lines.append("  receipt    none yet (running, or cut off by a crash)")
    else:
        lines += [
            f"  status     {line(receipt['status'])}",
            f"  effect     {_effect(receipt)}",
            f"  finished   {line(receipt.get('finishedAt', '-'))}",
            f"  hash       {line(receipt['receiptHash'])}",
        ]
        if "error" in receipt:
            error = receipt["error"]
            lines.append(
                f"  error      {line(error.get('code'))}: {line(error.get('message'))}"
            )
        box = (receipt.get("usage") or {}).get("sandbox")
        if isinstance(box, dict):
            lines.append(f"  sandbox    {_sandbox(box)}")
    lines += [
        f"  reconciled {line(n.outcome)} by {line(n.by)} at {line(n.at)}: {line(n.evidence)}"
        for n in notes
    ]
    if result is not None:
        lines += ["  result", "    " + block(result, indent="    ")]
    return lines


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
    if supersedes is None:  # one Uncertain receipt fewer outstanding, in the metrics
        from oarlock.telemetry._setup import default_observer

        invocation, _ = await store.governance().load(args.invocation_id)
        default_observer().reconciled(str(invocation.get("toolId", "")))
    note = f" (supersedes {line(supersedes)})" if supersedes else ""
    print(f"invocation {line(args.invocation_id)}: reconciled as {args.outcome}{note}")
    return EXIT_OK


async def _verify(args: argparse.Namespace, store: RunStore) -> int:
    gov = store.governance()
    keys = [load_public_key(k) for k in args.public_key or []]
    checkpoints = await gov.checkpoints()
    for f in args.checkpoint or []:
        checkpoints += _read_checkpoints(f)
    chains = {name: await gov.ledger(name) for name in await gov.chains()}
    reports = verify_chains(chains, checkpoints, keys)
    if not reports:  # an empty ledger: one empty chain, which verifies
        reports = verify_chains({DEFAULT_CHAIN: []}, (), keys)
    if args.approvers:
        from oarlock.governance._approvers import TrustedApprovers, approval_problems

        trusted = TrustedApprovers.from_file(args.approvers)
        for name, entries in chains.items():
            reports[name] = _with_problems(reports[name], approval_problems(entries, trusted))
    problems = [(name, p) for name, report in reports.items() for p in report.problems]
    ok = not problems
    if args.json:
        only = next(iter(reports.values())) if len(reports) == 1 else None
        print(
            dumps(
                {
                    "ok": ok,
                    "entries": sum(r.entries for r in reports.values()),
                    "headSeq": None if only is None else only.head_seq,
                    "headHash": None if only is None else only.head_hash,
                    "checkpointsChecked": sum(r.checkpoints_checked for r in reports.values()),
                    "signaturesVerified": bool(keys),
                    "chains": [_chain_json(name, r) for name, r in reports.items()],
                    "problems": [
                        {"chain": name, "seq": p.seq, "code": p.code, "message": p.message}
                        for name, p in problems
                    ],
                }
            )
        )
    elif ok:
        unsigned = not keys and any(r.checkpoints_checked for r in reports.values())
        signed = " (signatures not checked: give --public-key)" if unsigned else ""
        for name, report in reports.items():
            print(
                f"ledger ok: chain {line(name)}: {report.entries} entries, head "
                f"{report.head_seq} {line(report.head_hash)}; "
                f"{report.checkpoints_checked} checkpoint(s){signed}"
            )
    else:
        for name, problem in problems:
            print(
                f"ledger chain {line(name)}: {line(problem.message)} ({line(problem.code)})",
                file=sys.stderr,
            )
    return EXIT_OK if ok else EXIT_INVALID


def _with_problems(report: VerifyReport, more: list[LedgerProblem]) -> VerifyReport:
    if not more:
        return report
    everything = (*report.problems, *more)
    problems = tuple(sorted(everything, key=lambda p: (p.seq is None, p.seq or 0)))
    return dataclasses.replace(report, ok=False, problems=problems)


def _chain_json(name: str, report: VerifyReport) -> dict[str, Any]:
    return {
        "chain": name,
        "ok": report.ok,
        "entries": report.entries,
        "headSeq": report.head_seq,
        "headHash": report.head_hash,
        "checkpointsChecked": report.checkpoints_checked,
    }


_CHECKPOINT_MAX = 64 * 1024  # a checkpoint is a few hundred bytes


def _read_checkpoints(path: str) -> list[Checkpoint]:
    """The checkpoints of a file: one checkpoint, or a JSON array of them (as ``audit
    checkpoint --out`` writes when it signs several chains)."""
    from oarlock._input import read_input

    try:
        raw = read_input(path, what="checkpoint", code="usage", limit=_CHECKPOINT_MAX)
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise OarlockError(f"checkpoint {path} is not UTF-8 text", code="usage") from None
    except OSError as exc:
        raise OarlockError(
            f"cannot read checkpoint {path}: {exc.strerror or type(exc).__name__}", code="usage"
        ) from None
    except RecursionError:
        raise OarlockError(f"checkpoint {path} is nested too deeply", code="usage") from None
    except ValueError as exc:
        raise OarlockError(f"checkpoint {path} is not JSON: {exc}", code="usage") from None
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(item, dict) for item in items):
        raise OarlockError(
            f"checkpoint {path} is not a JSON object or an array of them", code="usage"
        )
    return [Checkpoint.from_json(item) for item in items]


async def _checkpoint(args: argparse.Namespace, store: RunStore) -> int:
    gov = store.governance()
    names = [args.chain] if args.chain else await gov.chains()
    key = load_private_key(args.key)
    heads: list[tuple[str, LedgerEntry]] = []
    for name in names:
        entries = await gov.ledger(name)
        if entries:
            heads.append((name, entries[-1]))
        elif args.chain:
            raise OarlockError(f"the ledger chain {name} is empty: nothing to sign", code="usage")
    if not heads:
        raise OarlockError("the ledger is empty: nothing to sign", code="usage")
    at = now_rfc3339()
    checkpoints = [sign_checkpoint(head, key, at, chain=name) for name, head in heads]
    forms = [c.to_json() for c in checkpoints]
    text = dumps(forms[0] if len(forms) == 1 else forms)
    if args.out:  # first: a file that cannot be written leaves the database as it was
        _write_file(args.out, text + "\n", "the checkpoint")
    for checkpoint in checkpoints:
        await gov.add_checkpoint(checkpoint)
    print(text)
    return EXIT_OK


def _write_file(path: str, text: str, what: str) -> None:
    """Write ``text`` to a new file: an existing one (an older checkpoint, or any other
    file) is never overwritten."""
    try:
        with open(path, "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        raise OarlockError(
            f"{path} exists; {what} is written to a new file", code="file_exists"
        ) from None
    except OSError as exc:
        raise OarlockError(
            f"cannot write {what} to {path}: {exc.strerror or type(exc).__name__}",
            code="file_unwritable",
        ) from None


_COMMANDS: dict[str, Command] = {
    "list": _list,
    "show": _show,
    "reconcile": _reconcile,
    "verify": _verify,
    "checkpoint": _checkpoint,
}


def _keygen(args: argparse.Namespace) -> int:
    key = generate_key()
    try:
        save_private_key(key, args.path)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, FileNotFoundError | NotADirectoryError):
            why += " (the key's folder must exist)"
        raise OarlockError(
            f"cannot write the key to {args.path}: {why}", code="file_unwritable"
        ) from None
    print(public_key_pem(key), end="")
    return EXIT_OK


def dispatch(args: argparse.Namespace) -> int:
    if args.action == "keygen":
        try:
            return _keygen(args)
        except OarlockError as exc:
            return refused(exc)
    return run_command(args, _COMMANDS[args.action])
