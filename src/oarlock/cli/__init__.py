"""The ``oarlock`` command. Subcommands import their modules only when they run, so that
starting the command costs little more than starting Python."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from oarlock import __version__

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oarlock", description="Durable, governed LLM agent runs."
    )
    parser.add_argument("--version", action="version", version=f"oarlock {__version__}")
    parser.add_argument(
        "--db",
        metavar="PATH",
        default=os.environ.get("OARLOCK_DB"),
        help="the run database (default: $OARLOCK_DB, else the user's data directory)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_run_commands(sub)

    p = sub.add_parser(
        "validate",
        help="check run, invocation and receipt documents",
        description="Check documents against their schema, then their "
        "semantic rules. Exit 0 if all are valid, 1 if any is not, 2 for a "
        "usage error.",
    )
    p.add_argument(
        "--kind",
        choices=["auto", "run", "invocation", "receipt"],
        default="auto",
        help="document kind (default: tell from each document)",
    )
    p.add_argument("--schema-only", action="store_true", help="check the schema alone")
    p.add_argument("--json", action="store_true", help="print one JSON report")
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="a JSON file, a folder (every *.json below it) or - for stdin",
    )
    p.set_defaults(handler="oarlock.cli._validate:run_validate")

    p = sub.add_parser(
        "upgrade",
        help="rewrite an oar/0.1 run document as oar/0.2",
        description="Convert a run document between oar/0.1 and oar/0.2, "
        "losslessly. Prints to stdout unless -o or --in-place is given.",
    )
    p.add_argument("path", metavar="PATH", help="a run document, or - for stdin")
    p.add_argument(
        "--to",
        choices=["oar/0.2", "oar/0.1"],
        default="oar/0.2",
        help="target format (default oar/0.2)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    out.add_argument("--in-place", action="store_true", help="rewrite PATH")
    p.set_defaults(handler="oarlock.cli._validate:run_upgrade")

    p = sub.add_parser(
        "check",
        help="check an agent file: every key, its tools, policy, model and MCP servers",
        description="Load an agent file as a run would and report every problem, each "
        "naming the file, the key and the rule. Loading imports the tools' modules; "
        "checking starts the MCP servers unless --no-connect is given. Exit 0 if there "
        "is none, 1 if there are problems, 2 for a usage error.",
    )
    p.add_argument("agent_file", metavar="AGENT_FILE")
    p.add_argument("--no-connect", action="store_true", help="do not start the MCP servers")
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long each MCP server may take to start and list its tools (default 30)",
    )
    p.set_defaults(handler="oarlock.cli._check:run_check")
    return parser


def _run_action(p: argparse.ArgumentParser, action: str) -> None:
    p.set_defaults(handler="oarlock.cli._runs:dispatch", action=action)


def _add_run_commands(sub: Any) -> None:
    p = sub.add_parser("run", help="start a run of an agent file")
    p.add_argument("agent_file", metavar="AGENT_FILE")
    p.add_argument("input", metavar="INPUT")
    p.add_argument("--tag", action="append", metavar="KEY=VALUE", help="tag the run")
    p.add_argument("--detach", action="store_true", help="run in the background")
    p.add_argument(
        "--model",
        metavar="MODEL",
        help="run the agent file unchanged against another model "
        "(e.g. openai-compatible:qwen2.5@http://127.0.0.1:11434/v1); kept for resumes",
    )
    _run_action(p, "run")

    runs = sub.add_parser("runs", help="list, show and export stored runs")
    rsub = runs.add_subparsers(dest="runs_command", metavar="COMMAND", required=True)
    p = rsub.add_parser("list", help="list runs, newest first")
    p.add_argument(
        "--status",
        choices=[
            "running",
            "waiting_approval",
            "completed",
            "failed",
            "halted_budget",
            "halted_max_turns",
            "cancelled",
        ],
    )
    p.add_argument("--tag", action="append", metavar="KEY=VALUE")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    _run_action(p, "runs list")
    for name, text in (("show", "a run's timeline"), ("export", "the oar/0.2 document")):
        p = rsub.add_parser(name, help=text)
        p.add_argument("run_id", metavar="RUN_ID")
        _run_action(p, f"runs {name}")

    for name, decision in (("approve", "approved"), ("deny", "denied"), ("respond", "responded")):
        p = sub.add_parser(name, help=f"record a '{decision}' decision on a pending call")
        p.add_argument("run_id", metavar="RUN_ID")
        p.add_argument("call_id", metavar="CALL_ID")
        if name == "respond":
            p.add_argument("text", metavar="TEXT", help="the answer the model receives")
        if name == "approve":
            p.add_argument("--edit", metavar="JSON", help="run with these arguments instead")
            p.add_argument(
                "--expires-in",
                type=float,
                metavar="SECONDS",
                help="the approval lapses if the call has not run by then",
            )
        p.add_argument(
            "--as",
            dest="principal",
            metavar="NAME",
            default=os.environ.get("OARLOCK_PRINCIPAL") or _user(),
            help="who decides (default: $OARLOCK_PRINCIPAL, else the login name)",
        )
        p.add_argument("--reason", metavar="TEXT", required=name == "deny")
        p.add_argument(
            "--no-resume",
            action="store_true",
            help="record the decision only; do not continue the run",
        )
        p.set_defaults(decision=decision)
        _run_action(p, "decide")

    for name, text in (
        ("resume", "continue a run"),
        ("cancel", "cancel a run"),
        ("replay", "re-run a stored run's model turns against today's tools"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("run_id", metavar="RUN_ID")
        if name == "cancel":
            p.add_argument("--reason", metavar="TEXT")
        _run_action(p, name)

    _add_governance_commands(sub)

    p = sub.add_parser("demo", help="run the refund desk demo, offline")
    p.add_argument("--yes", action="store_true", help="approve the refund without asking")
    p.set_defaults(handler="oarlock.cli._demo:run_demo")


def _user() -> str:
    import getpass

    try:
        return f"user:{getpass.getuser()}"
    except (KeyError, OSError):
        return "user:unknown"


def _gov_action(p: argparse.ArgumentParser, action: str) -> None:
    p.set_defaults(handler="oarlock.cli._governance:dispatch", action=action)


def _add_governance_commands(sub: Any) -> None:
    receipts = sub.add_parser("receipts", help="list, show and reconcile tool receipts")
    rsub = receipts.add_subparsers(dest="receipts_command", metavar="COMMAND", required=True)
    p = rsub.add_parser("list", help="receipts, newest first")
    p.add_argument("--run", metavar="RUN_ID", help="only this run's")
    p.add_argument(
        "--status", choices=["Succeeded", "Failed", "Denied", "TimedOut", "Uncertain"]
    )
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--open",
        action="store_true",
        help="list claimed calls that have no receipt yet (running, or cut off by a crash)",
    )
    p.add_argument("--json", action="store_true")
    _gov_action(p, "list")
    p = rsub.add_parser("show", help="one invocation: its receipt, effect and result")
    p.add_argument("invocation_id", metavar="INVOCATION_ID")
    p.add_argument("--json", action="store_true")
    _gov_action(p, "show")
    p = rsub.add_parser(
        "reconcile",
        help="resolve an Uncertain receipt (appends a record; edits nothing)",
    )
    p.add_argument("invocation_id", metavar="INVOCATION_ID")
    p.add_argument("--as", dest="outcome", required=True, choices=["succeeded", "not-applied"])
    p.add_argument("--evidence", required=True, metavar="TEXT")
    p.add_argument(
        "--by",
        dest="principal",
        metavar="NAME",
        default=os.environ.get("OARLOCK_PRINCIPAL") or _user(),
    )
    _gov_action(p, "reconcile")

    audit = sub.add_parser("audit", help="verify the ledger; sign checkpoints of its head")
    asub = audit.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)
    p = asub.add_parser(
        "verify",
        help="check the whole hash chain and every checkpoint; exit 1 at the first bad entry",
    )
    p.add_argument(
        "--public-key",
        action="append",
        metavar="PEM",
        help="a trusted checkpoint key (repeatable); without one, signatures are not checked",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        metavar="FILE",
        help="also check a checkpoint kept outside the database (repeatable)",
    )
    p.add_argument("--json", action="store_true")
    _gov_action(p, "verify")
    p = asub.add_parser("checkpoint", help="sign the ledger's head with an Ed25519 key")
    p.add_argument("--key", required=True, metavar="PEM", help="the private key file")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="also write the checkpoint here (keep it where the database's writers cannot)",
    )
    _gov_action(p, "checkpoint")
    p = asub.add_parser("keygen", help="make an Ed25519 key for checkpoints")
    p.add_argument("path", metavar="PATH", help="where to write the private key (mode 0600)")
    _gov_action(p, "keygen")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module, _, func = args.handler.partition(":")
    from importlib import import_module

    handler = getattr(import_module(module), func)
    try:
        code: int = handler(args)
    except KeyboardInterrupt:
        print("oarlock: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_INVALID
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
