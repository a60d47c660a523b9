"""``new_uuid`` gives what ``str(uuid.uuid4())`` gives: a random version-4 UUID's text."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from oarlock.governance._records import new_uuid, uuid_text


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
