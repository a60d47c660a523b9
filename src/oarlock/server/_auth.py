"""Who is calling: a bearer token (``Authorization: Bearer oat_...``), checked against the
stored hashes; what the token's role allows; who may decide a run's call
(:func:`decision_refusal`, the one place that says so, whichever way a decision comes);
and the per-principal rate limit on decisions."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from oarlock.server._errors import ApiError
from oarlock.server._tokens import Principal, TokenStore

__all__ = [
    "DecisionScope",
    "RateLimit",
    "authenticate",
    "authorize_decision",
    "decision_refusal",
    "require",
]


async def authenticate(request: Request) -> Principal:
    """The principal of the request's bearer token (401 without a live one)."""
    tokens: TokenStore = request.app.state.tokens
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    principal = None
    if scheme.lower() == "bearer" and token.strip():
        principal = await tokens.authenticate(token.strip())
    if principal is None and request.method in ("GET", "HEAD"):
        # the inbox's session reads the API (its live updates, a call's raw result); a
        # write through the API needs the token itself: a cookie is sent by the browser
        # on its own, a bearer token never is
        session = getattr(request.app.state, "sessions", None)
        if session is not None:
            principal = await session.principal(request)
    if principal is None:
        raise ApiError(
            401,
            "unauthenticated",
            # worded so that the redactor, which every message passes, leaves it whole
            "a live API token is required, sent in the Authorization header as Bearer <token>",
            headers={"WWW-Authenticate": 'Bearer realm="oarlock"'},
        )
    return principal


def require(permission: str) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the request's principal, if its role has ``permission`` (else 403)."""

    async def dependency(request: Request) -> Principal:
        principal = await authenticate(request)
        if not principal.may(permission):
            raise ApiError(
                403,
                "forbidden",
                f"role {principal.role} may not {permission}",
            )
        return principal

    return dependency


@dataclass(frozen=True, slots=True)
class DecisionScope:
    """What deciding a call depends on besides the principal: the run, its tenant (None
    when there is no such run), who started it (its ``startedBy`` tag) and the policy rule
    that asks for four eyes on the call (None when none does)."""

    run_id: str
    tenant: str | None
    started_by: str | None
    four_eyes_rule: str | None

    @classmethod
    def of(cls, tenant: str | None, item: Mapping[str, Any]) -> DecisionScope:
        """The scope of an approval as the service gives it (its JSON)."""
        policy = item.get("policy") or {}
        four_eyes = (policy.get("ruleId") or "default") if policy.get("fourEyes") else None
        started = (item.get("tags") or {}).get("startedBy")
        return cls(str(item["runId"]), tenant, started if isinstance(started, str) else None,
                   four_eyes)  # fmt: skip


DECISIONS = ("approved", "denied", "responded")


def decision_refusal(
    principal: Principal, scope: DecisionScope, decision: str | None
) -> ApiError | None:
    """Why ``principal`` may not make ``decision`` on a call of the run of ``scope``
    (``None`` for any decision: to read the call's exact arguments), or None when it may.

    The one place that decides it, for every way a decision comes (the API, the inbox's
    forms, the clients a webhook wakes) and for what a page offers: the role must allow
    deciding (approver, admin), the run must be of the principal's tenant (else 404, as
    one that does not exist), and under a four-eyes rule whoever started the run may not
    approve its calls (they may still deny them)."""
    if not principal.may("decide"):
        return ApiError(403, "forbidden", f"role {principal.role} may not decide")
    if scope.tenant is None or scope.tenant != principal.tenant:
        return ApiError(404, "not_found", f"no run {scope.run_id}")
    if (
        decision == "approved"
        and scope.four_eyes_rule is not None
        and scope.started_by == principal.name
    ):
        return ApiError(
            403,
            "four_eyes",
            f"rule {scope.four_eyes_rule} asks for four eyes: {principal.name} started this "
            "run and may not approve its calls",
        )
    return None


def authorize_decision(principal: Principal, scope: DecisionScope, decision: str | None) -> None:
    """Refuse (with :func:`decision_refusal`'s error) unless ``principal`` may decide."""
    refusal = decision_refusal(principal, scope, decision)
    if refusal is not None:
        raise refusal


@dataclass
class RateLimit:
    """A token bucket per principal: ``burst`` decisions at once, ``per_minute`` on
    average."""

    per_minute: float = 60.0
    burst: int = 20
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, who: str) -> None:
        """Spend one decision of ``who``'s, or refuse (429, with Retry-After)."""
        now = time.monotonic()
        rate = self.per_minute / 60.0
        level, at = self._buckets.get(who, (float(self.burst), now))
        level = min(float(self.burst), level + (now - at) * rate)
        if level < 1.0:
            wait = max(1, int((1.0 - level) / rate + 0.999))
            self._buckets[who] = (level, now)
            raise ApiError(
                429,
                "rate_limited",
                f"too many decisions: at most {self.per_minute:g} a minute "
                f"(burst {self.burst}); try again in {wait} s",
                headers={"Retry-After": str(wait)},
            )
        self._buckets[who] = (level - 1.0, now)
