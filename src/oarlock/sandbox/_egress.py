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

Whatever a client sends is answered or closed, never a failure of the proxy: a request
that is not one of these two kinds, a name that is not a host name or address or a port
outside 1-65535 get ``400``, a head past 16 KiB ``431``, a head not complete within ten
seconds ``408``, a host that cannot be reached ``502``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import ipaddress
import os
import re
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


_HEAD_TIMEOUT = 10.0  # seconds a client has to send the head of its request
_CONNECT_TIMEOUT = 10.0
_METHOD = re.compile(r"[A-Z]{1,20}")
_VERSION = re.compile(r"HTTP/1\.[01]")
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_PORT = re.compile(r"[0-9]{1,5}")
_PATH = re.compile(r"[\x21-\x7e]*")  # printable, no space


class _Refused(Exception):
    """A request this proxy answers with an error: the status line and why."""

    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


def _host(text: str) -> str:
    """The host of a request (a name, an IPv4 address or a bracketed IPv6 one), or
    _Refused."""
    if text.startswith("[") and text.endswith("]"):
        try:
            ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise _Refused("400 Bad Request", "not an IPv6 address") from None
        return text
    if len(text) > 253 or not _NAME.fullmatch(text):
        raise _Refused("400 Bad Request", "not a host name or address")
    return text


def _port(text: str) -> int:
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        raise _Refused("400 Bad Request", "not a port (1-65535)")
    return int(text)


def _target(line: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, the request line for the origin) of a proxy request line, or
    _Refused: ``CONNECT host:port`` or a request for an absolute ``http://`` URL."""
    fields = line.decode("latin-1").split(" ")
    if len(fields) != 3 or not _METHOD.fullmatch(fields[0]) or not _VERSION.fullmatch(fields[2]):
        raise _Refused("400 Bad Request", "not an HTTP/1 request line")
    method, target, version = fields
    if method == "CONNECT":
        host, colon, port = target.rpartition(":")
        if not colon:
            raise _Refused("400 Bad Request", "CONNECT takes host:port")
        return method, _host(host), _port(port), b""
    if not target.startswith("http://") or not _PATH.fullmatch(target):
        raise _Refused("400 Bad Request", "a request must be CONNECT or for an http:// URL")
    authority, _, path = target[len("http://") :].partition("/")
    host, port = authority, "80"
    if ":" in authority and not authority.endswith("]"):  # [::1] has no port, [::1]:8 has
        host, _, port = authority.rpartition(":")
    origin = f"{method} /{path} {version}\r\n".encode("latin-1")
    return method, _host(host), _port(port), origin


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        _close(writer)


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


async def _answer(writer: asyncio.StreamWriter, status: str, why: str) -> None:
    """Answer with an error and close."""
    body = f"oarlock: {why}\n".encode()
    head = f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Type: text/plain\r\n"
    writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.drain(), _HEAD_TIMEOUT)
    _close(writer)


async def _handle(
    patterns: Sequence[str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """One client: any request is answered, forwarded or closed, and nothing it sends
    raises out of here (no traceback reaches the event loop's handler)."""
    try:
        await _forward(patterns, reader, writer)
    except _Refused as exc:
        await _answer(writer, exc.status, exc.why)
    except Exception:  # a client's stream, whatever it holds, is never the host's failure
        _close(writer)


async def _forward(
    patterns: Sequence[str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
    except TimeoutError:
        raise _Refused("408 Request Timeout", "no complete request head in time") from None
    except asyncio.LimitOverrunError:
        raise _Refused(
            "431 Request Header Fields Too Large", f"a request head past {_HEAD_MAX} bytes"
        ) from None
    except (asyncio.IncompleteReadError, ConnectionError):
        _close(writer)
        return
    line, _, headers = head.partition(b"\r\n")
    method, host, port, origin = _target(line)
    if not allowed(host, port, patterns):
        raise _Refused("403 Forbidden", "egress to it is refused")
    try:
        up_reader, up_writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), port), _CONNECT_TIMEOUT
        )
    except (OSError, TimeoutError, ValueError):
        raise _Refused("502 Bad Gateway", f"{host}:{port} could not be reached") from None
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
