"""Values the SQLite store keeps compressed with a preset dictionary: a BLOB of one format
byte and a raw DEFLATE stream (RFC 1951, a 2 KB window) made with the dictionary the byte
names. A dictionary holds the member names and common values of the records of one column,
so that a record of a few hundred bytes, too short to repeat much of itself, still finds
them; it is fixed once rows use it (another dictionary is another format byte). Format
bytes are unique across the file: 1 names the ledger's dictionary
(``oarlock.store._sqlite_governance``), 2 the events' (``oarlock.store._sqlite``).

A compressor primed with the dictionary is made once and copied for each value: a copy
costs less than making one and setting its dictionary. Level 1 and memLevel 4 (a small hash
table, for inputs of a few hundred bytes): the cheapest settings measured, for 2% more
bytes than level 6. Packing a value of 200 bytes takes about 47,000 instructions (8
microseconds in a loop of its own), unpacking it about 2 microseconds."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

__all__ = ["Packing"]

_WBITS = -11  # raw DEFLATE, a 2 KB window: the dictionary and a record fit in it


class Packing:
    """The packed form of one column's values: ``dictionaries`` by format byte (those rows
    may hold), ``current`` the format new values are packed in."""

    __slots__ = ("_dictionaries", "_prefix", "_primed")

    def __init__(self, dictionaries: Mapping[int, bytes], current: int) -> None:
        if not all(0 < fmt < 32 for fmt in dictionaries):  # never a byte JSON text starts with
            raise ValueError("a format byte is from 1 to 31")
        self._dictionaries = dict(dictionaries)
        self._prefix = bytes([current])
        self._primed = zlib.compressobj(1, zlib.DEFLATED, _WBITS, 4, zlib.Z_DEFAULT_STRATEGY,
                                        self._dictionaries[current])  # fmt: skip

    def pack(self, data: bytes) -> bytes:
        """``data`` compressed, after its format byte."""
        compressor = self._primed.copy()
        return self._prefix + compressor.compress(data) + compressor.flush()

    def known(self, stored: bytes) -> bool:
        """Whether ``stored`` starts with a format byte of this column."""
        return bool(stored) and stored[0] in self._dictionaries

    def unpack(self, stored: bytes, limit: int) -> bytes | None:
        """The bytes ``stored`` packs; None when it does not start with a known format byte,
        is not one whole stream, or would expand beyond ``limit`` bytes."""
        if not self.known(stored):
            return None
        try:
            decompressor = zlib.decompressobj(_WBITS, zdict=self._dictionaries[stored[0]])
            data = decompressor.decompress(memoryview(stored)[1:], limit)
            if decompressor.eof and not decompressor.unused_data:
                return data
        except zlib.error:
            pass
        return None
