"""Who is calling: a bearer token (``Authorization: Bearer oat_...``), checked against the
stored hashes; what the token's role allows; and the per-principal rate limit on
decisions."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fastapi import Request

from oarlock.server._errors import ApiError
from oarlock.server._tokens import Principal, TokenStore

__all__ = ["RateLimit", "authenticate", "require"]


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
            "a live API token is required: Authorization: Bearer TOKEN",
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
