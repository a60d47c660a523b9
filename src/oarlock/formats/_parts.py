"""A run document's JSON put together from its parts (see ``_codec.dump_run_parts``):
here, apart from the typed models, for the commands that read a stored run without them."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["join_run_json"]


def join_run_json(head: bytes, parts: Sequence[bytes]) -> bytes:
    """A run document's JSON from ``head``, its JSON object without ``messages``, and
    ``parts``, each message's JSON, in order: the messages come last."""
    opening = b',"messages":[' if len(head) > 2 else b'"messages":['
    return b"".join((head[:-1], opening, b",".join(parts), b"]}"))
