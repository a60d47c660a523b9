"""Conversions between oar/0.1 and oar/0.2.

oar/0.2 adds the ``responded`` decision (and its ``response``) and changes nothing else,
so an oar/0.1 document is upgraded by naming the new format; every other member, and the
order of members, stays as it was. The way back is open only to documents that do not
use ``responded``.
"""

from __future__ import annotations

from typing import Any

from oarlock.errors import UpgradeError
from oarlock.formats._validate import ensure_valid

__all__ = ["downgrade", "upgrade"]


def upgrade(document: dict[str, Any]) -> dict[str, Any]:
    """The oar/0.2 form of a valid run document (oar/0.1 or already oar/0.2)."""
    ensure_valid(document, "run")
    return {k: ("oar/0.2" if k == "format" else v) for k, v in document.items()}


def downgrade(document: dict[str, Any]) -> dict[str, Any]:
    """The oar/0.1 form of a valid run document; refused if it uses ``responded``."""
    ensure_valid(document, "run")
    for i, appr in enumerate(document["pendingApprovals"]):
        if appr.get("decision") == "responded" or "response" in appr:
            raise UpgradeError(
                f"cannot write oar/0.1: pending approval {i} ({appr['toolCallId']!r}) uses the "
                "'responded' decision, which exists only in oar/0.2",
                code="responded_needs_oar_0_2",
            )
    return {k: ("oar/0.1" if k == "format" else v) for k, v in document.items()}
