"""Webhooks: a URL per tenant told of every approval requested and decided.

The body is the event as JSON (``{"id", "type", "tenant", "data"}``); the header
``Oarlock-Signature: t=UNIX,v1=HEX`` is the HMAC-SHA256, keyed by the tenant's secret, of
``t + "." + body``, so the receiver checks both the body and its age. A delivery that
fails (a network error, a status other than 2xx) is tried again with exponential backoff
and jitter, up to ``attempts`` times. Each tenant's deliveries go out in order from a
bounded queue of their own, in a task of their own: a slow or dead receiver never holds
up a run, a decision or another tenant (when its queue is full, the oldest event is
dropped and logged).

The webhooks file (``oarlock serve --webhooks FILE``) names each tenant's URL and the
environment variable holding its secret, never the secret::

    webhooks:
      - {tenant: demo, url: "https://hooks.example.com/oarlock", secret_env: DEMO_HOOK_SECRET}
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oarlock.errors import ConfigError

if TYPE_CHECKING:
    import httpx

    from oarlock.server._hub import HubEvent

__all__ = ["Webhook", "Webhooks", "load_webhooks", "sign"]

log = logging.getLogger("oarlock.server")


def sign(secret: bytes, body: bytes, at: int) -> str:
    """The ``Oarlock-Signature`` header of ``body`` sent at ``at``."""
    mac = hmac.new(secret, f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


@dataclass(frozen=True, slots=True)
class Webhook:
    tenant: str
    url: str
    secret: bytes = field(repr=False)


def load_webhooks(path: str | Path) -> list[Webhook]:
    """The webhooks of a webhooks file; ConfigError naming every problem."""
    from oarlock._input import read_input
    from oarlock._yaml import load_yaml

    try:
        raw = read_input(str(path), what="webhooks file", code="config_invalid")
        spec = load_yaml(raw.decode("utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the webhooks file: {exc}") from None
    problems: list[str] = []
    entries = spec.get("webhooks") if isinstance(spec, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: webhooks: must be a list")
    hooks = []
    for i, entry in enumerate(entries):
        where = f"{path}: webhooks[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"tenant", "url", "secret_env"}:
            problems.append(f"{where}: needs exactly tenant, url and secret_env")
            continue
        url, env = entry["url"], entry["secret_env"]
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            problems.append(f"{where}.url: must be an http(s) URL")
            continue
        secret = os.environ.get(env) if isinstance(env, str) else None
        if not secret:
            problems.append(f"{where}.secret_env: ${env} is not set")
            continue
        hooks.append(Webhook(str(entry["tenant"]), url, secret.encode()))
    if problems:
        raise ConfigError(f"{path}: {len(problems)} problems", problems=problems)
    return hooks


@dataclass
class _Lane:
    hook: Webhook
    queue: asyncio.Queue[dict[str, Any]]
    task: asyncio.Task[None] | None = None


class Webhooks:
    """The deliveries of every tenant's webhook."""

    def __init__(
        self,
        hooks: list[Webhook],
        *,
        attempts: int = 6,
        base_delay: float = 0.5,
        max_delay: float = 60.0,
        queue_size: int = 1000,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.attempts, self.base_delay, self.max_delay = attempts, base_delay, max_delay
        self._lanes = {h.tenant: _Lane(h, asyncio.Queue(queue_size)) for h in hooks}
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self.delivered = 0
        self.failed = 0

    def start(self) -> None:
        import httpx

        self._client = httpx.AsyncClient(transport=self._transport, timeout=10.0)
        for lane in self._lanes.values():
            lane.task = asyncio.ensure_future(self._send_all(lane))

    async def stop(self) -> None:
        for lane in self._lanes.values():
            if lane.task is not None:
                lane.task.cancel()
        await asyncio.gather(
            *(lane.task for lane in self._lanes.values() if lane.task is not None),
            return_exceptions=True,
        )
        if self._client is not None:
            await self._client.aclose()

    def tell(self, tenant: str, event: HubEvent) -> None:
        """Queue an event for the tenant's webhook (if it has one); never waits."""
        if event.kind not in ("approval_requested", "approval_decided"):
            return
        lane = self._lanes.get(tenant)
        if lane is None:
            return
        body = {"id": event.id, "type": event.kind, "tenant": tenant, "data": event.data}
        if lane.queue.full():
            dropped = lane.queue.get_nowait()
            log.warning("webhook of tenant %s: queue full, dropped event %s", tenant, dropped["id"])
        lane.queue.put_nowait(body)

    async def _send_all(self, lane: _Lane) -> None:
        while True:
            body = await lane.queue.get()
            await self._deliver(lane.hook, body)

    async def _deliver(self, hook: Webhook, event: dict[str, Any]) -> None:
        import httpx

        assert self._client is not None
        body = json.dumps(event, separators=(",", ":"), ensure_ascii=True).encode()
        for attempt in range(1, self.attempts + 1):
            at = int(time.time())
            headers = {
                "Content-Type": "application/json",
                "Oarlock-Signature": sign(hook.secret, body, at),
                "Oarlock-Event": event["type"],
                "Oarlock-Delivery": event["id"],
            }
            with contextlib.suppress(httpx.HTTPError):
                reply = await self._client.post(hook.url, content=body, headers=headers)
                if 200 <= reply.status_code < 300:
                    self.delivered += 1
                    return
            if attempt < self.attempts:
                delay = min(self.base_delay * 2 ** (attempt - 1), self.max_delay)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        self.failed += 1
        log.warning(
            "webhook of tenant %s: event %s not delivered after %d attempts",
            hook.tenant,
            event["id"],
            self.attempts,
        )
