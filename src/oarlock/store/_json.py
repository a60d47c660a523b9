"""Compact JSON text for the stores' columns, with one encoder made once.

``compact(value)`` is ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``,
byte for byte (a test holds them together): ``json.dumps``, and the ``encode`` of an encoder
made once, set up a C encoder and a dict for its check for cycles at every call; here the
C encoder is made once and its dict emptied after a value it refused (it keeps the
containers it was inside). Where the C encoder is missing, ``json.JSONEncoder`` serves."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["compact"]


def _made() -> Callable[[Any], str]:
    encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    text = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or text is None:
        return encoder.encode
    markers: dict[int, Any] = {}
    try:
        chunks = make(markers, encoder.default, text, None, ":", ",", False, False, True)
    except TypeError:  # another signature: the class serves
        return encoder.encode

    def compact(value: Any) -> str:
        if isinstance(value, str):
            return text(value)  # type: ignore[no-any-return]
        try:
            return "".join(chunks(value, 0))
        except BaseException:
            markers.clear()
            raise

    return compact


compact = _made()
