"""``new_uuid`` gives what ``str(uuid.uuid4())`` gives: a random version-4 UUID's text."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oarlock.governance._records import name_uuid, new_uuid, run_uuid, step_uuid, uuid_text


def test_every_new_uuid_is_a_version_4_uuid_in_canonical_text() -> None:
    made = {new_uuid() for _ in range(2000)}
    assert len(made) == 2000
    for text in made:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text


@given(st.binary(min_size=16, max_size=16))
def test_new_uuid_sets_the_bits_uuid4_sets(random: bytes) -> None:
    assert uuid_text(random) == str(uuid.UUID(bytes=random, version=4))


_NAMESPACE = uuid.UUID("6f0a7c3e-4d52-5a8e-9b1f-0a4c6e8d2b17")


@given(st.text(), st.integers(min_value=0, max_value=10**6))
def test_name_based_ids_are_uuid5s_of_the_names(run_id: str, turn: int) -> None:
    try:
        name = f"step:{run_id}:{turn}".encode()
    except UnicodeEncodeError:  # a lone surrogate: refused as uuid5 refuses it
        with pytest.raises(UnicodeEncodeError):
            step_uuid(run_id, turn)
        return
    assert step_uuid(run_id, turn) == str(uuid.uuid5(_NAMESPACE, name.decode()))
    assert name_uuid(f"run:{run_id}") == str(uuid.uuid5(_NAMESPACE, f"run:{run_id}"))
    run_uuid.cache_clear()
    expected = run_id if _is_uuid(run_id) else uuid.uuid5(_NAMESPACE, f"run:{run_id}")
    assert run_uuid(run_id) == str(uuid.UUID(str(expected)))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def test_step_ids_are_made_without_uuid_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = str(uuid.uuid5(_NAMESPACE, "step:run-1:3"))

    def refused(*args: object, **kwargs: object) -> uuid.UUID:
        raise AssertionError("uuid.uuid5 called")

    monkeypatch.setattr(uuid, "uuid5", refused)
    assert step_uuid("run-1", 3) == expected
