"""Egress through a filtering proxy, for the ``loopback`` and ``allowlist`` profiles.

A sandboxed call has a network namespace of its own: nothing it opens leaves it. For these
two profiles the runner serves, for the call's lifetime, an HTTP proxy on a socket file the
call can reach, and starts the call's program behind a small forwarder that listens on
``127.0.0.1:3128`` inside the namespace and passes each connection to that socket. The
program finds the proxy in ``HTTP_PROXY``/``HTTPS_PROXY`` (and their lower-case forms).

The proxy accepts ``CONNECT host:port`` (HTTPS and any TCP protocol) and plain HTTP
requests with an absolute URL, and opens a connection only when ``host:port`` matches an
allowed pattern (``api.example.com:443``, ``*.example.com:443``, ``127.0.0.1:*``); anything
else is answered ``403`` and never leaves the machine. Patterns match the name the call
asked for, as it asked for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from oarlock.sandbox._workspace import Workspace

__all__ = ["FORWARDER", "PROXY_PORT", "allowed", "serve_proxy"]

PROXY_PORT = 3128
SOCKET_IN_SANDBOX = "/run/oarlock-proxy.sock"
_HEAD_MAX = 16384

FORWARDER = r"""
import os, socket, subprocess, sys, threading
path = sys.argv[1]
argv = sys.argv[3:]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", 3128))
server.listen(64)
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
def serve():
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
sys.exit(subprocess.call(argv))
"""


def allowed(host: str, port: int, patterns: Sequence[str]) -> bool:
    """Whether ``host:port`` matches one of ``patterns`` (``name:port``, globs allowed in
    the name, ``*`` for any port)."""
    host = host.lower().strip("[]")
    for pattern in patterns:
        name, _, want = pattern.rpartition(":")
        name = name.lower().strip("[]")
        if fnmatch.fnmatchcase(host, name) and want in ("*", str(port)):
            return True
    return False


def _target(line: bytes) -> tuple[str, str, int, bytes] | None:
    """(method, host, port, the request line for the origin) of a proxy request line."""
    try:
        method, target, version = line.decode("latin-1").strip().split(" ")
    except ValueError:
        return None
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return (method, host, int(port), b"") if port.isdigit() else None
    if not target.startswith("http://"):
        return None
    rest = target[len("http://") :]
    authority, _, path = rest.partition("/")
    host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "80")
    if not port.isdigit():
        return None
    origin = f"{method} /{path} {version}\r\n".encode("latin-1")
    return method, host, int(port), origin


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _handle(
    patterns: Sequence[str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        line = await reader.readuntil(b"\r\n")
        headers = await reader.readuntil(b"\r\n\r\n") if not line.endswith(b"\r\n\r\n") else b""
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    target = _target(line)
    if target is None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
        writer.close()
        return
    method, host, port, origin = target
    if not allowed(host, port, patterns):
        writer.write(
            b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 32\r\n\r\n"
            b"oarlock: egress to it is refused"
        )
        writer.close()
        return
    try:
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    except (OSError, TimeoutError):
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
        writer.close()
        return
    if method == "CONNECT":
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
    else:
        up_writer.write(origin + headers)
    await asyncio.gather(_splice(reader, up_writer), _splice(up_reader, writer))


@contextlib.asynccontextmanager
async def serve_proxy(ws: Workspace, patterns: Sequence[str]) -> AsyncIterator[dict[str, str]]:
    """Serve the proxy while the block runs; the environment the call needs for it (the
    ``OARLOCK_PROXY_SOCKET`` it forwards to is bound into the sandbox by the runner)."""
    folder = Path(tempfile.mkdtemp(prefix="oarlock-egress-"))
    os.chmod(folder, 0o711)
    path = folder / "proxy.sock"
    server = await asyncio.start_unix_server(
        lambda r, w: _handle(patterns, r, w), path=str(path), limit=_HEAD_MAX
    )
    os.chmod(path, 0o600)
    if ws.uid is not None:
        os.chown(path, ws.uid, ws.uid)
    url = f"http://127.0.0.1:{PROXY_PORT}"
    try:
        yield {
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            "OARLOCK_PROXY_SOCKET": str(path),
        }
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
        shutil.rmtree(folder, ignore_errors=True)
