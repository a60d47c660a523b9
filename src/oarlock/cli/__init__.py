"""The ``oarlock`` command. Subcommands import their modules only when they run, so that
starting the command costs little more than starting Python."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oarlock import __version__
from oarlock._render import block, line
from oarlock.cli._args import (
    OneCommand,
    Parser,
    concurrency,
    edit_json,
    limit,
    path,
    principal,
    seconds,
    stored_path,
    text,
)

if TYPE_CHECKING:
    from oarlock.errors import OarlockError

__all__ = ["build_parser", "main", "refused"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser; with ``only``, the name of a command, the parsers of the
    other commands are not built (parsing ``only``'s arguments gives the same result)."""
    parser = Parser(prog="oarlock", description="Durable, governed LLM agent runs.")
    parser.add_argument("--version", action="version", version=f"oarlock {__version__}")
    parser.add_argument(
        "--db",
        metavar="PATH|URL",
        type=path,
        default=os.environ.get("OARLOCK_DB") or None,
        help="the run database: an SQLite file, or a postgresql:// URL (default: "
        "$OARLOCK_DB, else a file in the user's data directory)",
    )
    _telemetry_options(parser, argparse.SUPPRESS)
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, action=OneCommand
    )
    assert isinstance(sub, OneCommand)
    sub.only = only
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
        type=path,
        help="a JSON file, a folder (every *.json below it) or - for stdin",
    )
    p.set_defaults(handler="oarlock.cli._validate:run_validate")

    p = sub.add_parser(
        "upgrade",
        help="rewrite an oar/0.1 run document as oar/0.2",
        description="Convert a run document between oar/0.1 and oar/0.2, "
        "losslessly. Prints to stdout unless -o or --in-place is given.",
    )
    p.add_argument("path", metavar="PATH", type=path, help="a run document, or - for stdin")
    p.add_argument(
        "--to",
        choices=["oar/0.2", "oar/0.1"],
        default="oar/0.2",
        help="target format (default oar/0.2)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "-o", "--output", metavar="FILE", type=path, help="write here instead of stdout"
    )
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
    from oarlock.cli._server import add_commands

    add_commands(sub)
    _db_after_the_command(parser)
    return parser


# the commands that open the run database, by the module that handles them
_DB_HANDLERS = ("oarlock.cli._runs:", "oarlock.cli._governance:", "oarlock.cli._worker:",
                "oarlock.cli._demo:", "oarlock.cli._server:", "oarlock.cli._temporal:")  # fmt: skip


def _db_after_the_command(parser: argparse.ArgumentParser) -> None:
    """``--db`` given after the command (``oarlock runs show ID --db PATH``) as well as
    before it: every command that opens the database takes it too, and, given there, it
    wins over the one before."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in {id(p): p for p in action.choices.values()}.values():
            if sub.get_default("handler") is None:
                _db_after_the_command(sub)  # a group of commands: its own subcommands
            elif str(sub.get_default("handler")).startswith(_DB_HANDLERS):
                sub.add_argument(
                    "--db", metavar="PATH|URL", type=path, default=argparse.SUPPRESS,
                    help="the run database (as before the command)",
                )  # fmt: skip
                _telemetry_options(sub, argparse.SUPPRESS)


def _telemetry_options(p: argparse.ArgumentParser, default: Any) -> None:
    """``--otel`` and ``--log-format``, before the command or after one that runs."""
    p.add_argument(
        "--otel",
        action="store_true",
        default=default,
        help="send traces and metrics to an OpenTelemetry collector (OTLP over HTTP, "
        "configured by the OTEL_* variables; needs oarlock[otel]); an OTEL_EXPORTER_OTLP_* "
        "or OTEL_*_EXPORTER variable does the same",
    )
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=default,
        help="json: log lines on standard error as JSON, with run, trace and span ids "
        "(text, the default: the command's own output only)",
    )


def _telemetry(args: argparse.Namespace) -> Any:
    """Set up what ``--otel``, the OTEL_* variables and ``--log-format`` ask for; the
    providers to shut down at the end (None when there are none)."""
    if getattr(args, "log_format", "text") == "json":
        from oarlock.telemetry._logs import log_json

        log_json()
    from oarlock.telemetry._setup import configure_from_env

    return configure_from_env(bool(getattr(args, "otel", False)))


def _run_action(p: argparse.ArgumentParser, action: str) -> None:
    p.set_defaults(handler="oarlock.cli._runs:dispatch", action=action)


def _show_options(p: argparse.ArgumentParser) -> None:
    """``runs show``'s: the span tree, or following the run as it goes."""
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--trace",
        action="store_true",
        help="show the run's span tree (drives, model requests, tool calls, waits "
        "for a decision: durations and statuses) from its event log",
    )
    shown.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then show what happens as it happens, until the run ends "
        "(exit status as for run)",
    )
    p.add_argument(
        "--interval",
        type=seconds,
        default=0.5,
        metavar="SECONDS",
        help="with --follow, how often to look (default 0.5)",
    )


def _add_run_commands(sub: Any) -> None:
    p = sub.add_parser("run", help="start a run of an agent file")
    p.add_argument("agent_file", metavar="AGENT_FILE", type=stored_path)
    p.add_argument("input", metavar="INPUT", type=text)
    p.add_argument("--tag", action="append", type=text, metavar="KEY=VALUE", help="tag the run")
    _drive_options(p)
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
    p.add_argument("--tag", action="append", type=text, metavar="KEY=VALUE")
    p.add_argument("--limit", type=limit, default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true")
    _run_action(p, "runs list")
    for name, what in (("show", "a run's timeline"), ("export", "the oar/0.2 document")):
        p = rsub.add_parser(name, help=what)
        p.add_argument("run_id", metavar="RUN_ID", type=text)
        if name == "show":
            _show_options(p)
        _run_action(p, f"runs {name}")

    for name, decision in (("approve", "approved"), ("deny", "denied"), ("respond", "responded")):
        p = sub.add_parser(name, help=f"record a '{decision}' decision on a pending call")
        p.add_argument("run_id", metavar="RUN_ID", type=text)
        p.add_argument("call_id", metavar="CALL_ID", type=text)
        if name == "respond":
            p.add_argument("text", metavar="TEXT", type=text, help="the answer the model receives")
        if name == "approve":
            p.add_argument(
                "--edit", metavar="JSON", type=edit_json, help="run with these arguments instead"
            )
            p.add_argument(
                "--key",
                metavar="PEM",
                type=path,
                help="sign the approval with this key (default: $OARLOCK_APPROVER_KEY, else "
                "~/.config/oarlock/approver.key if it exists; see oarlock keys create)",
            )
            p.add_argument(
                "--expires-in",
                type=seconds,
                metavar="SECONDS",
                help="the approval lapses if the call has not run by then "
                "(above 0, at most 366 days)",
            )
        p.add_argument(
            "--as",
            dest="principal",
            metavar="NAME",
            type=principal,
            help="who decides (default: the principal the key is trusted for, else "
            "$OARLOCK_PRINCIPAL, else user: and the login name)",
        )
        p.add_argument("--reason", metavar="TEXT", type=text, required=name == "deny")
        p.add_argument(
            "--no-resume",
            action="store_true",
            help="record the decision only; do not continue the run",
        )
        p.set_defaults(decision=decision)
        _run_action(p, "decide")

    for name, what in (
        ("resume", "drive a stored run on"),
        ("continue", "continue a completed run's conversation with a new message"),
        ("retry", "run a failed or halted run again from its last committed step"),
        ("cancel", "cancel a run"),
        ("replay", "re-run a stored run's model turns against today's tools"),
    ):
        p = sub.add_parser(name, help=what)
        p.add_argument("run_id", metavar="RUN_ID", type=text)
        if name == "continue":
            p.add_argument("text", metavar="TEXT", type=text, help="the user's new message")
        if name == "cancel":
            p.add_argument("--reason", metavar="TEXT", type=text)
        _run_action(p, name)

    _add_governance_commands(sub)
    _add_key_commands(sub)
    _add_sandbox_commands(sub)
    _add_worker_commands(sub)
    _add_temporal_commands(sub)

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
    p.add_argument("--run", metavar="RUN_ID", type=text, help="only this run's")
    p.add_argument("--status", choices=["Succeeded", "Failed", "Denied", "TimedOut", "Uncertain"])
    p.add_argument("--limit", type=limit, default=50, help="at most this many (default 50)")
    p.add_argument(
        "--open",
        action="store_true",
        help="list claimed calls that have no receipt yet (running, or cut off by a crash)",
    )
    p.add_argument("--json", action="store_true")
    _gov_action(p, "list")
    p = rsub.add_parser("show", help="one invocation: its receipt, effect and result")
    p.add_argument("invocation_id", metavar="INVOCATION_ID", type=text)
    p.add_argument("--json", action="store_true")
    _gov_action(p, "show")
    p = rsub.add_parser(
        "reconcile",
        help="resolve an Uncertain receipt (appends a record; edits nothing)",
    )
    p.add_argument("invocation_id", metavar="INVOCATION_ID", type=text)
    p.add_argument("--as", dest="outcome", required=True, choices=["succeeded", "not-applied"])
    p.add_argument("--evidence", required=True, type=text, metavar="TEXT")
    p.add_argument(
        "--supersede",
        action="store_true",
        help="replace the invocation's latest reconciliation (recorded as superseding it)",
    )
    p.add_argument(
        "--by",
        dest="principal",
        metavar="NAME",
        type=text,
        default=os.environ.get("OARLOCK_PRINCIPAL") or _user(),
    )
    _gov_action(p, "reconcile")

    audit = sub.add_parser("audit", help="verify the ledger; sign checkpoints of its head")
    asub = audit.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)
    p = asub.add_parser(
        "verify",
        help="check every chain of the ledger and every checkpoint; exit 1 if any is bad",
    )
    p.add_argument(
        "--public-key",
        action="append",
        metavar="PEM",
        type=path,
        help="a trusted checkpoint key (repeatable); without one, signatures are not checked",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        metavar="FILE",
        type=path,
        help="also check a checkpoint kept outside the database (repeatable)",
    )
    p.add_argument(
        "--approvers",
        metavar="FILE",
        type=path,
        help="also check that every human approval is signed by a key this approvers "
        "file trusts for its principal",
    )
    p.add_argument("--json", action="store_true")
    _gov_action(p, "verify")
    p = asub.add_parser(
        "checkpoint", help="sign the head of every ledger chain with an Ed25519 key"
    )
    p.add_argument("--key", required=True, metavar="PEM", type=path, help="the private key file")
    p.add_argument(
        "--chain",
        metavar="NAME",
        type=text,
        help="sign only this chain's head (a tenant's, on PostgreSQL; default: every chain)",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        type=path,
        help="also write the checkpoint here (keep it where the database's writers cannot)",
    )
    _gov_action(p, "checkpoint")
    p = asub.add_parser("keygen", help="make an Ed25519 key for checkpoints")
    p.add_argument(
        "path", metavar="PATH", type=path, help="where to write the private key (mode 0600)"
    )
    _gov_action(p, "keygen")


def _days(value: str) -> float:
    import argparse
    import math

    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{line(value)} is not a number of days") from None
    if not math.isfinite(number) or not 0 <= number <= 36500:
        raise argparse.ArgumentTypeError(f"{line(value)}: give days from 0 to 36500")
    return number


def _add_sandbox_commands(sub: Any) -> None:
    box = sub.add_parser("sandbox", help="sandbox isolation on this host; run workspaces")
    bsub = box.add_subparsers(dest="sandbox_command", metavar="COMMAND", required=True)
    where = {"metavar": "DIR", "type": path, "help": "the workspaces folder"}
    p = bsub.add_parser("check", help="what isolation sandboxed calls get on this host")
    p.add_argument("--isolation", choices=("bubblewrap", "unshare"), default="bubblewrap")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="oarlock.cli._sandbox:dispatch", action="check", workspaces=None)
    p = bsub.add_parser("list", help="the runs' workspaces")
    p.add_argument("--workspaces", **where)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="oarlock.cli._sandbox:dispatch", action="list")
    p = bsub.add_parser("show", help="a workspace's files, or one file's text")
    p.add_argument("workspace_id", metavar="WORKSPACE_ID", type=text)
    p.add_argument("path", nargs="?", metavar="PATH", type=text)
    p.add_argument("--workspaces", **where)
    p.set_defaults(handler="oarlock.cli._sandbox:dispatch", action="show")
    p = bsub.add_parser("prune", help="remove workspaces untouched for some days")
    p.add_argument("--older-than", type=_days, default=30.0, metavar="DAYS")
    p.add_argument("--workspaces", **where)
    p.set_defaults(handler="oarlock.cli._sandbox:dispatch", action="prune")


def _add_key_commands(sub: Any) -> None:
    keys = sub.add_parser("keys", help="approvers' signing keys and the keys trusted")
    ksub = keys.add_subparsers(dest="keys_command", metavar="COMMAND", required=True)
    p = ksub.add_parser(
        "create",
        help="make an approver's Ed25519 signing key and trust it",
        description="Write a new signing key (mode 0600) and its public key (.pub), and "
        "trust it for one principal in the approvers file.",
    )
    p.add_argument("path", nargs="?", metavar="PATH", type=path, help="the key file to write")
    p.add_argument(
        "--as", dest="principal", metavar="NAME", type=text, help="the principal it signs as"
    )
    p.add_argument("--approvers", metavar="FILE", type=path, help="the approvers file to add it to")
    p.add_argument("--no-trust", action="store_true", help="do not add it to an approvers file")
    p.set_defaults(handler="oarlock.cli._keys:dispatch", action="create")
    p = ksub.add_parser("list", help="the keys an approvers file trusts")
    p.add_argument("--approvers", metavar="FILE", type=path, help="the approvers file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="oarlock.cli._keys:dispatch", action="list")


def _drive_options(p: argparse.ArgumentParser) -> None:
    """How ``run`` drives the run: here, by a worker, or on Temporal."""
    p.add_argument(
        "--detach",
        action="store_true",
        help="only submit the run: a worker (oarlock worker) drives it",
    )
    p.add_argument(
        "--queue",
        metavar="QUEUE",
        type=text,
        default="default",
        help="the queue whose workers drive the run when it is handed to them (default: default)",
    )
    p.add_argument(
        "--model",
        metavar="MODEL",
        type=text,
        help="run the agent file against another model (e.g. openai:gpt-4.1); kept for "
        "resumes; a cost limit needs a price for it in the agent file's pricing",
    )
    p.add_argument(
        "--on",
        choices=["native", "temporal"],
        help="what drives the run: this process and oarlock's workers (native), or a "
        "Temporal cluster's workers (temporal); default: the agent file's engine, else native",
    )
    _temporal_target(p)


def _temporal_target(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        metavar="HOST:PORT",
        type=text,
        help="the Temporal frontend (default: $OARLOCK_TEMPORAL_ADDRESS, else 127.0.0.1:7233)",
    )
    p.add_argument(
        "--task-queue", metavar="QUEUE", type=text, help="its task queue (default: oarlock)"
    )
    p.add_argument(
        "--namespace", metavar="NS", type=text, default="default", help="(default: default)"
    )


def _add_temporal_commands(sub: Any) -> None:
    temporal = sub.add_parser("temporal", help="runs driven by a Temporal cluster")
    tsub = temporal.add_subparsers(dest="temporal_command", metavar="COMMAND", required=True)
    p = tsub.add_parser(
        "worker",
        help="a Temporal worker driving oarlock runs until stopped (SIGTERM or SIGINT)",
        description="Poll the task queue for the workflows and activities of oarlock runs "
        "and take their steps against the run database (--db); --agents names a folder of "
        "agent files for runs whose agent file is not where it was.",
    )
    p.add_argument("--address", metavar="HOST:PORT", type=text, required=True)
    p.add_argument("--task-queue", metavar="QUEUE", type=text, required=True)
    p.add_argument("--namespace", metavar="NS", type=text, default="default")
    p.add_argument("--agents", metavar="DIR", type=path, help="a folder of agent files")
    p.add_argument(
        "--key",
        metavar="PEM",
        type=path,
        help="sign the approvals decided through this worker with this key (default: the "
        "worker's own, trusted by itself alone)",
    )
    p.add_argument("--as", dest="principal", metavar="NAME", type=text,
                   help="the principal of --key when a decision names none")  # fmt: skip
    p.add_argument("--drain", type=seconds, default=30.0, metavar="SECONDS",
                   help="on SIGTERM or SIGINT, how long the steps in flight may take to "
                   "finish (default 30)")  # fmt: skip
    p.set_defaults(handler="oarlock.cli._temporal:dispatch")


def _add_worker_commands(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="drive the runs of the database until stopped (SIGTERM or SIGINT)",
        description="Claim runnable runs (fairly across tenants) and drive up to "
        "--concurrency of them at once, each under a lease renewed every --heartbeat "
        "seconds and lost after --lease seconds without one. On SIGTERM or SIGINT, claim "
        "nothing more, let each run finish its step (within --drain seconds), and hand the "
        "runs back; a second signal stops them at once.",
    )
    p.add_argument(
        "--concurrency",
        type=concurrency,
        default=4,
        metavar="N",
        help="runs driven at once (default 4)",
    )
    p.add_argument(
        "--tenant",
        action="append",
        type=text,
        metavar="TENANT",
        help="claim only this tenant's runs (repeatable; default: every tenant's)",
    )
    p.add_argument(
        "--queue",
        type=text,
        default="default",
        metavar="QUEUE",
        help="claim the runs of this queue (default: default)",
    )
    for name, default, what in (
        ("--poll", 1.0, "the longest wait between looks for work"),
        ("--heartbeat", 5.0, "how often the worker says it is alive and renews its leases"),
        ("--lease", 30.0, "how long a lease lasts without a heartbeat (at least two)"),
        ("--max-run-time", 3600.0, "the longest one drive of a run may take; then it fails"),
        ("--drain", 30.0, "on shutdown, how long runs may take to finish their step"),
    ):
        p.add_argument(
            name,
            type=seconds,
            default=default,
            metavar="SECONDS",
            help=f"{what} (default {default:g})",
        )
    p.set_defaults(handler="oarlock.cli._worker:dispatch", action="worker")

    p = sub.add_parser("workers", help="the live workers: heartbeat age and the runs they hold")
    p.add_argument(
        "--within",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="a worker is live if it sent a heartbeat this recently (default 60)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="oarlock.cli._worker:dispatch", action="workers")


def refused(exc: OarlockError) -> int:
    """Say on one line why a command was refused; its exit status (2 for a usage error,
    else 1)."""
    print(f"oarlock: {line(exc)}", file=sys.stderr)
    return EXIT_USAGE if exc.code == "usage" else EXIT_INVALID


def _safe_streams() -> None:
    """Standard output and error never fail to encode: what cannot be encoded (a lone
    surrogate, or any character on a stream that is not UTF-8) is written as an escape."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # closed, or cannot be changed
                reconfigure(errors="backslashreplace")


def _unexpected(exc: Exception) -> int:
    """One line for a failure no rule of oarlock's expected (exit 1); the traceback only
    when ``OARLOCK_DEBUG=1``."""
    if os.environ.get("OARLOCK_DEBUG") == "1":
        import traceback

        sys.stderr.write(block("".join(traceback.format_exception(exc)), indent="") + "\n")
    else:
        print(
            f"oarlock: unexpected error: {line(type(exc).__name__)}: {line(exc)} "
            "(OARLOCK_DEBUG=1 shows where)",
            file=sys.stderr,
        )
    return EXIT_INVALID


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: this process's arguments) and return its exit
    status. A usage error raises ``SystemExit(2)``, as ``argparse`` does."""
    _safe_streams()
    args = _parser_for(sys.argv[1:] if argv is None else argv).parse_args(argv)
    from oarlock.errors import OarlockError

    configured = None
    try:
        from importlib import import_module

        configured = _telemetry(args)
        module, _, func = args.handler.partition(":")
        handler = getattr(import_module(module), func)
        code: int = handler(args)
        sys.stdout.flush()  # a reader gone away is found here, not at exit
    except KeyboardInterrupt:
        print("oarlock: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_INVALID
    except OarlockError as exc:
        return refused(exc)
    except Exception as exc:
        return _unexpected(exc)
    finally:
        if configured is not None:
            with contextlib.suppress(Exception):  # what cannot be exported is dropped
                configured.shutdown()
    return code


# the options before a command that take a value
_VALUED = frozenset({"--db", "--log-format"})


def _parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the command ``argv`` names, the others left unbuilt; the whole parser
    when it names none that exists, or asks for help or the version before it."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in ("-h", "--help", "--version", "--"):
            break
        elif token.startswith("-"):
            skip = token in _VALUED
        else:
            parser = build_parser(only=token)
            action = next(a for a in parser._actions if isinstance(a, OneCommand))
            if token in action.choices:
                return parser
            break
    return build_parser()


def _silence_stdout() -> None:
    """After the reader of standard output went away: send what is left to /dev/null, so
    that the flush at exit does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
