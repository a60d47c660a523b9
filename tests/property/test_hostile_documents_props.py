"""Any bytes, and any JSON-like text (lone surrogates, huge integers and numbers, deep
nesting, example documents with a member replaced by anything), fed to ``oarlock
validate`` and ``oarlock upgrade``: exit status 0, 1 or 2 and never a traceback, with
output a UTF-8 terminal can show."""

from __future__ import annotations

import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oarlock.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/*.json"))
_FOLDER = Path(tempfile.mkdtemp(prefix="oarlock-docs-"))

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
TEXT = st.text(st.one_of(st.characters(), SURROGATES), max_size=12)
NUMBER_TOKENS = st.sampled_from(
    ["9" * 5000, "-" + "9" * 4301, "1e400", "-1e999", "9" * 400 + ".5", "1e-400", "NaN", "2**53"]
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)


class _StrictOut(io.TextIOWrapper):
    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="strict")


def _run(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    path = _FOLDER / "doc.json"
    path.write_bytes(data)
    monkeypatch.setattr(sys, "stdout", _StrictOut())
    monkeypatch.setattr(sys, "stderr", _StrictOut())
    for argv in (
        ["validate", str(path)],
        ["validate", "--json", str(path)],
        ["validate", "--kind", "run", str(path)],
        ["upgrade", str(path)],
        ["upgrade", "--to", "oar/0.1", str(path)],
    ):
        code = main(argv)
        assert code in (0, 1, 2), (argv, code)
        sys.stdout.flush()
        sys.stderr.flush()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_paths(v, (*prefix, i)))
    return found


@st.composite
def mutated_examples(draw: st.DrawFn) -> bytes:
    doc = json.loads(draw(st.sampled_from(EXAMPLES)).read_text("utf-8"))
    paths = _paths(doc)[1:]
    path = draw(st.sampled_from(paths))
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = "\0MARK\0"
    text = json.dumps(doc)  # \\u escapes for every surrogate
    replacement = draw(st.one_of(NUMBER_TOKENS, VALUES.map(json.dumps), st.just("[" * 300)))
    return text.replace('"\\u0000MARK\\u0000"', replacement, 1).encode("utf-8")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_any_bytes(data: bytes) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _run(monkeypatch, data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES.map(lambda v: json.dumps(v).encode("utf-8")))
def test_any_json_value(data: bytes) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _run(monkeypatch, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_examples())
def test_example_documents_with_any_member_replaced(data: bytes) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _run(monkeypatch, data)
