"""The ``oarlock`` command. Subcommands import their modules only when they run, so that
starting the command costs little more than starting Python."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from oarlock import __version__

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oarlock", description="Durable, governed LLM agent runs."
    )
    parser.add_argument("--version", action="version", version=f"oarlock {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

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
    return parser


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
