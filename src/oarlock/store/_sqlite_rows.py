"""How the SQLite store keeps a run's columns: the document (whole and compressed at
rest; running, without its messages beside their rows), the events' data (JSON text, or
compressed from 512 bytes), and the rows read back into them, refusing what is corrupt
(IntegrityError). :mod:`oarlock.store._sqlite` says why each form is as it is."""

from __future__ import annotations

import json
import sqlite3
from functools import cache
from typing import TYPE_CHECKING, Any

from oarlock.errors import IntegrityError
from oarlock.formats._parts import join_run_json
from oarlock.store._json import compact as _compact

if TYPE_CHECKING:
    from oarlock.formats._models import RunDocument
    from oarlock.store._base import Event
    from oarlock.store._packing import Packing

Parts = tuple[bytes, ...]
"""The JSON of each message of a running document, as stored in ``messages``."""
SPLIT_FROM = 8192
"""Bytes of JSON from which a running document is stored in parts: a smaller one is
rewritten whole, in the row and two overflow pages at most, for less than its messages
as rows of their own cost (a 10-turn run's 4.5 KB document took 3% longer a turn in
parts, measured in alternating processes)."""
# zlib level 3 and a 16 KB window: 30% less work than the default (level 6, 32 KB) for
# 3.5% more bytes
_ZLIB_LEVEL, _ZLIB_WBITS = 3, 14


def _columns(document: RunDocument, split: bool = False) -> tuple[dict[str, Any], Parts]:
    """The columns of ``runs``: the document (compressed at rest), and what is copied out
    of it; with ``split``, a running document of ``SPLIT_FROM`` bytes or more without its
    messages (``message_rows`` their count: they are the rows of ``messages``, see the
    module), else the document whole; and the JSON of each message (the bytes of the
    document's cache, as the column or those rows hold them)."""
    from oarlock.formats._codec import dump_run_parts

    head, parts = dump_run_parts(document)
    messages, in_rows = tuple(parts), False
    if document.status != "running":
        import zlib

        data = zlib.compress(join_run_json(head, parts), _ZLIB_LEVEL, _ZLIB_WBITS)
    elif split and len(head) + sum(map(len, parts)) >= SPLIT_FROM:
        data, in_rows = head, True
    else:
        data = join_run_json(head, parts)
    due = None
    if document.status == "waiting_approval":
        from oarlock.store._leases import approval_due

        due = approval_due(document)
    return {
        "id": document.id,
        "agent": document.agent,
        "status": document.status,
        "turns": document.turns,
        "tags": _compact(document.tags or {}),
        "created_at": document.created_at,
        "updated_at": document.updated_at,
        "approval_due": due,
        "document": data,
        "message_rows": len(messages) if in_rows else None,
    }, messages


# The preset dictionary of stored event data (format byte 2, see oarlock.store._packing):
# the members of each kind of event, and the values they most often take; fixed once rows
# use it. The strings an event most often repeats come last (DEFLATE codes near distances
# shorter).
_EVENT_DICTIONARY = (
    '{"text":""}{"toolCallId":"call_","toolName":"","decision":"denied","decidedBy":"",'
    '"arguments":{},"reason":"","editedArguments":{},"response":"","principal":""}'
    '"decision":"responded""decision":"approved","decidedBy":"human"'
    '{"from":"running","to":"failed"}{"from":"running","to":"cancelled"}'
    '{"from":"running","to":"halted_max_turns"}{"from":"running","to":"halted_budget"}'
    '{"from":"waiting_approval","to":"running"}{"from":"running","to":"waiting_approval"}'
    '{"agent":"","model":"","tags":{}}{"toolCallId":"call_","toolName":"","arguments":{}}'
    '"replayed":true,"spanId":"","status":"Failed","status":"Denied","status":"Uncertain",'
    '"status":"TimedOut","isError":true,'
    '{"toolCallId":"call_","toolName":"","isError":false,"contentChars":,"span":{"status":'
    '"Succeeded","drive":"","driveStartUs":17,"startUs":17,"durationMs":'
    '{"turn":,"inputTokens":0,"outputTokens":0,"costUsd":0.0,"toolCalls":["call_"],'
    '"span":{"drive":"","driveStartUs":17,"startUs":17,"durationMs":0.'
    '{"from":"running","to":"completed"}'
).encode("ascii")
_EVENT_FORMAT = 2
_EVENT_PACK_FROM = 512  # bytes of JSON from which event data is compressed
# what stored event data may expand to: more is a row made to exhaust memory, read as corrupt
_MAX_EVENT = 64 * 1024 * 1024


@cache
def _event_packing() -> Packing:
    from oarlock.store._packing import Packing

    return Packing({_EVENT_FORMAT: _EVENT_DICTIONARY}, _EVENT_FORMAT)


def _event_rows(run_id: str, events: list[Event]) -> list[dict[str, Any]]:
    """The rows of ``events``: data of ``_EVENT_PACK_FROM`` bytes or more compressed."""
    from oarlock.store._base import event_rows

    rows = []
    for kind, at, text in event_rows(run_id, events):
        raw = text.encode("utf-8")
        data = _event_packing().pack(raw) if len(raw) >= _EVENT_PACK_FROM else text
        rows.append({"run_id": run_id, "kind": kind, "at": at, "data": data})
    return rows


def _event_data(run_id: str, seq: int, stored: Any) -> Any:
    """The data of a stored event: JSON text, or compressed (a BLOB that does not start
    with ``{``), which must be whole and of a known format."""
    if isinstance(stored, bytes) and not stored.startswith(b"{"):
        packing = _event_packing()
        if not packing.known(stored):
            shown = f"byte {stored[0]}" if stored else "nothing"
            raise IntegrityError(
                f"run {run_id}: stored data of event {seq} is in an unknown format ({shown})"
            )
        unpacked = packing.unpack(stored, _MAX_EVENT)
        if unpacked is None:
            raise IntegrityError(f"run {run_id}: stored data of event {seq} is corrupt")
        stored = unpacked
    return _json(run_id, stored, f"data of event {seq}")


def _json(run_id: str, text: str | bytes, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        raise IntegrityError(f"run {run_id}: stored {what} is not JSON") from None


def _unpack(run_id: str, stored: object) -> object:
    """The JSON of a stored document: ``stored`` itself unless it is compressed."""
    if not isinstance(stored, bytes) or stored.startswith(b"{"):
        return stored
    import zlib

    try:
        decompressor = zlib.decompressobj()
        data = decompressor.decompress(stored)
        if decompressor.eof and not decompressor.unused_data:
            return data
    except zlib.error:
        pass
    raise IntegrityError(f"run {run_id}: stored document is corrupt: not a whole zlib stream")


def _stored_json(run_id: str, rows: list[sqlite3.Row]) -> object:
    """The JSON of a stored document from the rows of ``load_run``: its column, unpacked,
    or (``message_rows`` set) that column without its messages and the message rows, which
    must be all there, numbered 0, 1, ... (IntegrityError otherwise)."""
    return _stored_parts(run_id, rows)[0]


def _stored_parts(run_id: str, rows: list[sqlite3.Row]) -> tuple[object, Parts | None]:
    """:func:`_stored_json`, and the message rows' JSON when the document is in parts."""
    stored, _, _, count, *_ = rows[0]
    raw = _unpack(run_id, stored)
    if count is None:
        return raw, None
    found = [] if rows[0][4] is None else [(row[4], row[5]) for row in rows]
    if type(count) is not int or [idx for idx, _ in found] != list(range(count)):
        raise IntegrityError(
            f"run {run_id}: stored messages are not whole: {len(found)} rows where the run "
            f"counts {count!r}"
        )
    head = raw.encode("utf-8") if isinstance(raw, str) else raw
    parts = [data.encode("utf-8") if isinstance(data, str) else data for _, data in found]
    if not (isinstance(head, bytes) and head[:1] == b"{" and head[-1:] == b"}"
            and all(isinstance(part, bytes) for part in parts)):  # fmt: skip
        raise IntegrityError(f"run {run_id}: stored document is corrupt: not JSON text")
    return join_run_json(head, parts), tuple(parts)


def _summary(row: sqlite3.Row) -> dict[str, Any]:
    """A row of ``runs`` as the members of a :class:`RunSummary`, in its order."""
    return {
        "id": row["id"],
        "agent": row["agent"],
        "status": row["status"],
        "tags": _json(row["id"], row["tags"], "tags"),
        "turns": row["turns"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "tenant": row["tenant"],
        "holder": row["holder"],
        "lease_until": row["lease_until"],
    }
