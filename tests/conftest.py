"""Shared fixtures: the example documents (a fresh deep copy for every use), and helpers
that recompute digests independently of oarlock (hashlib over the ``rfc8785`` package),
so that a test which mutates a record breaks only the rule it means to break."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

RUN_EXAMPLES = (
    "runs/refund-waiting-approval.json",
    "runs/refund-completed.json",
    "runs/responded-oar-0.2.json",
    "runs/legacy-oar-0.1.json",
)
INVOCATION_EXAMPLES = ("invocations/lookup-read.json", "invocations/refund-spend.json")
RECEIPT_EXAMPLES = (
    "receipts/refund-succeeded.json",
    "receipts/lookup-denied.json",
    "receipts/refund-uncertain.json",
)
ALL_EXAMPLES = RUN_EXAMPLES + INVOCATION_EXAMPLES + RECEIPT_EXAMPLES

_cache: dict[str, str] = {}


def _example_text(name: str) -> str:
    if name not in _cache:
        _cache[name] = (EXAMPLES / name).read_text("utf-8")
    return _cache[name]


def load_example(name: str) -> dict[str, Any]:
    """A fresh parsed copy of ``examples/<name>`` (mutating it never leaks)."""
    value = json.loads(_example_text(name))
    assert isinstance(value, dict)
    return value


def independent_digest(value: Any) -> str:
    """``sha256:`` + hex SHA-256 of the RFC 8785 form, computed without oarlock."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def rehash_invocation(doc: dict[str, Any]) -> dict[str, Any]:
    doc["argumentsHash"] = independent_digest(doc["arguments"])
    return doc


def rehash_receipt(doc: dict[str, Any]) -> dict[str, Any]:
    doc["receiptHash"] = independent_digest({k: v for k, v in doc.items() if k != "receiptHash"})
    return doc


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture
def example() -> Callable[[str], dict[str, Any]]:
    """``example("runs/refund-completed.json")`` gives a fresh, mutable copy."""
    return load_example


@pytest.fixture
def deep_copy() -> Callable[[Any], Any]:
    return copy.deepcopy


@pytest.fixture
def run_waiting() -> dict[str, Any]:
    return load_example("runs/refund-waiting-approval.json")


@pytest.fixture
def run_completed() -> dict[str, Any]:
    return load_example("runs/refund-completed.json")


@pytest.fixture
def run_responded() -> dict[str, Any]:
    return load_example("runs/responded-oar-0.2.json")


@pytest.fixture
def run_legacy() -> dict[str, Any]:
    return load_example("runs/legacy-oar-0.1.json")


@pytest.fixture
def invocation_read() -> dict[str, Any]:
    return load_example("invocations/lookup-read.json")


@pytest.fixture
def invocation_spend() -> dict[str, Any]:
    return load_example("invocations/refund-spend.json")


@pytest.fixture
def receipt_succeeded() -> dict[str, Any]:
    return load_example("receipts/refund-succeeded.json")


@pytest.fixture
def receipt_denied() -> dict[str, Any]:
    return load_example("receipts/lookup-denied.json")


@pytest.fixture
def receipt_uncertain() -> dict[str, Any]:
    return load_example("receipts/refund-uncertain.json")


@pytest.fixture
def rehash() -> Any:
    """``rehash.invocation(doc)`` / ``rehash.receipt(doc)``: fix the digest in place."""

    class _Rehash:
        invocation = staticmethod(rehash_invocation)
        receipt = staticmethod(rehash_receipt)
        digest = staticmethod(independent_digest)

    return _Rehash()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests on a fresh event loop (``asyncio.run``)."""
    import asyncio
    import inspect

    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
    return True


def pytest_configure(config: pytest.Config) -> None:
    """No test reads or writes the user's own oarlock configuration (approver keys and the
    approvers file): every process the tests start finds an empty configuration home."""
    import os
    import tempfile

    home = tempfile.mkdtemp(prefix="oarlock-test-config-")
    os.environ["XDG_CONFIG_HOME"] = home
    for name in ("OARLOCK_APPROVER_KEY", "OARLOCK_APPROVERS", "OARLOCK_PRINCIPAL", "OARLOCK_DB"):
        os.environ.pop(name, None)


@pytest.fixture(autouse=True)
def _pg_databases() -> Iterator[None]:
    """The PostgreSQL databases a test made (``pgtest.new_database``) are dropped when it
    ends."""
    yield
    import sys

    pgtest = sys.modules.get("pgtest")
    if pgtest is not None:
        pgtest.drop_created()


@pytest.fixture(autouse=True)
def _own_config_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    """Each test its own configuration home: a key one test creates (``oarlock keys
    create``, run in process by the CLI fuzz tests too) is never another test's default."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


def _package_digest() -> str:
    """A digest of every file of the oarlock package and the examples (names and bytes)."""
    roots = (ROOT / "src" / "oarlock", EXAMPLES)
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_DIGEST] = _package_digest()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that writes into the package or the examples (a command told to write where
    a shipped file is) fails the session, whatever else passed. The PostgreSQL template
    database of the session is dropped."""
    import sys

    pgtest = sys.modules.get("pgtest")
    if pgtest is not None:
        pgtest.drop_template()
    before = session.config.stash.get(_DIGEST, None)
    if before is not None and _package_digest() != before:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nthe tests changed files of src/oarlock or examples/ (see git status)")


_DIGEST = pytest.StashKey[str]()


@pytest.fixture(autouse=True)
def _telemetry_off_after_each_test() -> Iterator[None]:
    """A test that configures OpenTelemetry in this process (``oarlock --otel`` run in
    process, say) sets the API's global providers, which the API lets be set once a
    process: they are put back to unset afterwards, so that telemetry stays off in every
    other test, as it is in a process that never asked for it; so are JSON logs."""
    yield
    from opentelemetry import trace
    from opentelemetry.metrics import _internal as metrics

    from oarlock.telemetry import _setup

    if trace._TRACER_PROVIDER is not None or metrics._METER_PROVIDER is not None:
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE._done = False
        metrics._METER_PROVIDER = None
        metrics._METER_PROVIDER_SET_ONCE._done = False
        for observer in _setup._DEFAULT:  # it remembers having seen them: it looks again
            observer._on = False
            observer._instruments = None
    _json_logs_off()


def _json_logs_off() -> None:
    """JSON logs asked for in this process (``oarlock --log-format json`` run in process)
    are turned off again: the handler taken away, the flag put back."""
    import logging

    from oarlock.telemetry import _logs

    if _logs._ON[0]:
        logger = logging.getLogger("oarlock")
        for handler in list(logger.handlers):
            if isinstance(handler.formatter, _logs.JsonLogFormatter):
                logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        _logs._ON[0] = False
