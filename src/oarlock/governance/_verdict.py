"""A policy engine's verdict, checked before the executor acts on it: anything but a
well-formed :class:`~oarlock.governance.PolicyVerdict` (an unknown effect, a rule id or a
reason that is not text, a deadline that is not one, a sandbox requirement not known) is an
error, which the executor turns into a denial: it fails closed, and records only what the
formats allow."""

from __future__ import annotations

import math

from oarlock.formats._jcs import portable_problem
from oarlock.governance._policy import PolicyVerdict

__all__ = ["checked_verdict", "is_text"]

_MAX_TTL = 10 * 366 * 86400  # an approval deadline beyond ten years is not one
_EGRESS = frozenset({"none", "loopback", "allowlist", "host"})
_ISOLATION = frozenset({"bubblewrap", "unshare"})

_EFFECTS = frozenset({"allow", "deny", "require_approval"})


def is_text(value: object) -> bool:
    """Whether ``value`` is text with a canonical form (no lone surrogate)."""
    return isinstance(value, str) and portable_problem(value) is None


def checked_verdict(verdict: object) -> PolicyVerdict:
    """``verdict`` if it is a well-formed :class:`PolicyVerdict`; else TypeError or ValueError."""
    if not isinstance(verdict, PolicyVerdict):
        raise TypeError(f"the policy returned a {type(verdict).__name__}, not a PolicyVerdict")
    if not isinstance(verdict.effect, str) or verdict.effect not in _EFFECTS:
        raise ValueError(
            f"the policy returned the unknown effect {verdict.effect!r} "
            "(allow, deny or require_approval)"
        )
    if verdict.rule_id is not None and not (is_text(verdict.rule_id) and verdict.rule_id):
        raise ValueError("the policy returned a rule id that is not non-empty text")
    if not isinstance(verdict.reasons, tuple | list) or not all(
        is_text(r) for r in verdict.reasons
    ):
        raise ValueError("the policy returned reasons that are not a list of text")
    ttl = verdict.approval_ttl_seconds
    if ttl is not None and (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not 0 < ttl <= _MAX_TTL
    ):
        raise ValueError(f"the policy returned an approval deadline of {ttl!r} seconds")
    if verdict.sandbox_egress is not None and verdict.sandbox_egress not in _EGRESS:
        raise ValueError(f"the policy returned the egress profile {verdict.sandbox_egress!r}")
    if verdict.sandbox_isolation is not None and verdict.sandbox_isolation not in _ISOLATION:
        raise ValueError(f"the policy returned the isolation {verdict.sandbox_isolation!r}")
    return verdict
