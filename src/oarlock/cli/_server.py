"""``oarlock serve`` (the HTTP API and inbox, with the embedded worker) and ``oarlock
tokens create|list|revoke`` (the API tokens: printed once, only their hash stored).

The server needs ``pip install 'oarlock[server]'``; the token commands do not."""

from __future__ import annotations

import argparse
from typing import Any

from oarlock._render import dumps, line
from oarlock.cli import EXIT_OK, refused
from oarlock.cli._args import host, path, seconds, text
from oarlock.errors import NotFound, OarlockError

__all__ = ["add_commands", "dispatch"]


def _port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{line(value)} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{line(value)}: a port is from 0 to 65535")
    return number


def _bytes(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{line(value)} is not a number of bytes") from None
    if not 1024 <= number <= 1 << 30:
        raise argparse.ArgumentTypeError(f"{line(value)}: give 1024 to 1073741824 bytes")
    return number


def add_commands(sub: Any) -> None:
    from oarlock.demo import AGENT_FILE

    p = sub.add_parser(
        "serve",
        help="serve the HTTP API and the approval inbox (pip install 'oarlock[server]')",
        description="Serve the run database over HTTP: the API under /v1 (OpenAPI at "
        "/openapi.json) and the inbox at /, with the embedded worker driving runs "
        "(unless --no-worker). Stops on SIGTERM or SIGINT.",
    )
    p.add_argument("--host", default="127.0.0.1", type=host, help="default 127.0.0.1")
    p.add_argument("--port", default=8080, type=_port, help="default 8080 (0: any free one)")
    p.add_argument(
        "--agents",
        metavar="DIR",
        type=path,
        default=str(AGENT_FILE.parent),
        help="the folder of the agent files runs are started from (default: the demo's)",
    )
    p.add_argument("--no-worker", action="store_true", help="leave runs to `oarlock worker`s")
    p.add_argument(
        "--key",
        metavar="PEM",
        type=path,
        help="sign decisions with this approver key (default: the user's own, made on first "
        "use; see oarlock keys create)",
    )
    p.add_argument(
        "--max-body", type=_bytes, default=1_048_576, metavar="BYTES",
        help="the largest request body (default 1048576)",
    )  # fmt: skip
    p.add_argument(
        "--decisions-per-minute", type=seconds, default=60.0, metavar="N",
        help="decisions one token may make a minute (default 60)",
    )  # fmt: skip
    p.add_argument(
        "--webhooks",
        metavar="FILE",
        type=path,
        help="a YAML file naming each tenant's webhook URL and the variable of its secret",
    )
    p.set_defaults(handler="oarlock.cli._server:dispatch", action="serve")

    tokens = sub.add_parser("tokens", help="API tokens of `oarlock serve`")
    tsub = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    p = tsub.add_parser("create", help="make a token; it is printed once, only its hash is kept")
    p.add_argument("--tenant", required=True, type=text)
    p.add_argument("--role", required=True, choices=["viewer", "operator", "approver", "admin"])
    p.add_argument("--name", required=True, type=text, help="the principal decisions record")
    p.add_argument("--expires-in", type=seconds, metavar="SECONDS", help="default: never")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="oarlock.cli._server:dispatch", action="tokens create")
    p = tsub.add_parser("list", help="the tokens (never their secrets)")
    p.add_argument("--tenant", type=text)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="oarlock.cli._server:dispatch", action="tokens list")
    p = tsub.add_parser("revoke", help="revoke a token by its id")
    p.add_argument("token_id", metavar="TOKEN_ID", type=text)
    p.set_defaults(handler="oarlock.cli._server:dispatch", action="tokens revoke")


async def _tokens(args: argparse.Namespace, store: Any) -> int:
    from oarlock.server._tokens import check_expiry, check_name, check_role, token_store

    if args.action == "tokens create":  # refused before the database gains its tables
        check_name(args.name, "name")
        check_name(args.tenant, "tenant")
        check_role(args.role)
        check_expiry(args.expires_in)
    tokens = token_store(store)
    if args.action == "tokens create" or await tokens.made():
        await tokens.prepare()
    elif args.action == "tokens revoke":  # a database without tokens stays without
        raise NotFound(f"no live token {args.token_id}", code="no_token")
    else:
        print("[]" if args.json else "no tokens")
        return EXIT_OK
    if args.action == "tokens create":
        token, info = await tokens.create(
            name=args.name, tenant=args.tenant, role=args.role, expires_in=args.expires_in
        )
        if args.json:
            print(dumps({**info.to_json(), "token": token}))
        else:
            print(
                f"token {line(info.id)} for {line(info.name)} ({line(info.role)} of tenant "
                f"{line(info.tenant)}); it is shown this once:"
            )
            print(token)
        return EXIT_OK
    if args.action == "tokens revoke":
        await tokens.revoke(args.token_id)
        print(f"token {line(args.token_id)}: revoked")
        return EXIT_OK
    found = await tokens.list(args.tenant)
    if args.json:
        print(dumps([t.to_json() for t in found]))
    elif not found:
        print("no tokens")
    for t in [] if args.json else found:
        j = t.to_json()
        state = "revoked" if t.revoked_at else f"expires {j['expiresAt']}" if t.expires_at else ""
        print(
            f"{line(t.id)}  {line(t.name):<20} {line(t.role):<9} tenant {line(t.tenant)}  "
            f"created {j['createdAt']}  {state}".rstrip()
        )
    return EXIT_OK


def _approver(key: str | None) -> Any:
    """The key the server signs its decisions with (each as the deciding token's name):
    ``--key``, else the user's own key (made on first use) when the user's approvers file
    trusts it for any principal, so that a decision outlives the server and is honoured by
    the user's workers; said on one line. Else none: each decision is then signed with the
    server process's own key, which only it trusts."""
    from oarlock.governance._approvers import ApproverKey, default_approvers

    if key:
        return ApproverKey.load(key, "server")
    from oarlock.governance._userkey import UNAVAILABLE, user_key

    own = "decisions are signed with this process's own key, honoured by this process alone"
    try:
        user = user_key()
    except OarlockError as exc:
        if exc.code != UNAVAILABLE:
            raise
        print(f"oarlock serve: {line(exc)}; {own}", flush=True)
        return None
    trusted = default_approvers().key(user.key_id)
    if trusted is None or not trusted.allows("\0any principal"):
        named = "no principal" if trusted is None else ", ".join(trusted.principals)
        print(f"oarlock serve: the approver key {user.key_id} ({line(user.path)}) is trusted "
              f"for {line(named)}, not for any principal; {own}", flush=True)  # fmt: skip
        return None
    made = f", made now and trusted in {line(user.approvers)}" if user.made else ""
    print(f"oarlock serve: decisions signed with approver key {user.key_id} "
          f"({line(user.path)}{made})", flush=True)  # fmt: skip
    return ApproverKey("server", user.private_key)


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from oarlock.server import ServerSettings, create_app
    except ImportError as exc:
        raise OarlockError(
            f"oarlock serve needs its extra: pip install 'oarlock[server]' ({exc.name} is missing)",
            code="missing_extra",
        ) from None
    from oarlock.cli._runs import _db

    approver = _approver(args.key)
    hooks: tuple[Any, ...] = ()
    if args.webhooks:
        from oarlock.server._webhooks import load_webhooks

        hooks = tuple(load_webhooks(args.webhooks))
    settings = ServerSettings(
        webhooks=hooks,
        max_body_bytes=args.max_body,
        decisions_per_minute=args.decisions_per_minute,
        worker=not args.no_worker,
        approver=approver,
    )
    db = _db(args)
    app = create_app(db if isinstance(db, str) else str(db), args.agents, settings)
    for problem in app.state.problems:
        print(f"agent file not loaded: {line(problem)}", flush=True)
    names = ", ".join(line(e.name) for e in app.state.service.agents) or "none"
    print(f"oarlock serve: agents {names}; worker {'off' if args.no_worker else 'on'}", flush=True)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            hub = getattr(app.state, "hub", None)
            if hub is not None:  # the event streams end, so that their connections close
                hub.closing = True
            super().handle_exit(sig, frame)
            # a shutdown asked for is a clean exit (status 0), as for oarlock worker, not
            # the signal raised again once the server has stopped
            self._captured_signals.clear()

    from oarlock._gc import settle

    settle()  # what start-up made stays out of the full collections
    Server(config).run()
    return EXIT_OK


def dispatch(args: argparse.Namespace) -> int:
    if args.action == "serve":
        try:
            return _serve(args)
        except OarlockError as exc:
            return refused(exc)
    from oarlock.cli._runs import run_command

    return run_command(args, _tokens)
