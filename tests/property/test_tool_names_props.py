"""Tool names as providers take them: for any set of names, the mapping is injective,
every name sent matches the providers' pattern, and every name maps back to itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from hypothesis import example, given
from hypothesis import strategies as st

from oarlock.models._names import ToolNames

PATTERN = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # whole names only: fullmatch (a `$` would
# also match before a trailing newline)

# names of every kind: MCP-style ``server.tool``, already-safe names that may collide with
# a mapped one, long ones, empty, non-ASCII, surrogates
name = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="ab._-", max_size=70),
    st.from_regex(r"[a-z]{1,3}[._][a-z]{1,3}", fullmatch=True),
    st.from_regex(r"[a-zA-Z0-9_-]{60,70}", fullmatch=True),
    st.text(alphabet=st.characters(codec=None), max_size=10),
)
names = st.sets(name, max_size=25)


@given(names)
@example({"0\n", "0_"})  # a name that a `$` pattern takes for a safe one
def test_the_mapping_is_injective_safe_and_reversible(given_names: set[str]) -> None:
    mapping = ToolNames(given_names)
    sent = {n: mapping.safe(n) for n in given_names}
    assert len(set(sent.values())) == len(given_names)  # injective
    for real, safe in sent.items():
        assert PATTERN.fullmatch(safe), (real, safe)
        assert mapping.real(safe) == real
        if PATTERN.fullmatch(real):
            assert safe == real  # a safe name is sent as it is


def test_every_process_maps_a_set_the_same_way() -> None:
    """A run resumed in another process (another hash seed, another set order) sends
    the names its conversation was sent with."""
    given_names = ["a.b", "a_b", "a b", "a:b", "x" * 70, "y.y" * 30, "", "é.tool"]
    code = (
        "import json, sys; from oarlock.models._names import ToolNames; "
        "ns = json.loads(sys.argv[1]); m = ToolNames(ns); "
        "print(json.dumps([m.safe(n) for n in ns]))"
    )
    seen: set[str] = set()
    for seed in ("0", "1", "4242"):
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(given_names)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        seen.add(out.stdout)
    assert len(seen) == 1
    assert json.loads(seen.pop()) == [ToolNames(given_names).safe(n) for n in given_names]


@given(st.from_regex(r"[a-z]{1,10}\.[a-z]{1,10}", fullmatch=True))
def test_a_server_tool_name_reads_as_itself(real: str) -> None:
    # notes.read -> notes_read: the model sees a name it can make sense of
    assert ToolNames([real]).safe(real) == real.replace(".", "_")


def test_collisions_are_resolved_deterministically() -> None:
    mapping = ToolNames(["notes.read", "notes_read", "notes read"])
    assert mapping.safe("notes_read") == "notes_read"
    safe = {mapping.safe("notes.read"), mapping.safe("notes read")}
    assert len(safe) == 2 and "notes_read" not in safe
    assert all(PATTERN.fullmatch(s) and s.startswith("notes_read_") for s in safe)
    assert mapping.safe("notes read") == "notes_read_" + mapping.safe("notes read")[-8:]


def test_a_name_not_in_the_mapping_comes_back_unchanged() -> None:
    mapping = ToolNames(["notes.read"])
    assert mapping.real("made_up") == "made_up"
    assert mapping.real("notes_read") == "notes.read"
