"""Live updates: a run's event stream (resumed with Last-Event-ID, ending with the run),
the inbox stream of a running ``oarlock serve`` (snapshot, new approvals, decisions,
resumed with Last-Event-ID, ended cleanly by SIGTERM), and webhooks signed with HMAC and
retried with backoff."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from oarlock.server import ServerSettings
from oarlock.server._webhooks import Webhook
from oarlock.worker import WorkerSettings
from server_kit import Kit, run, serve_process


def _events(text: str) -> list[dict[str, Any]]:
    """The complete events of an event stream's text (each ends with a blank line)."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n")[:-1]:
        fields: dict[str, Any] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            if name in ("id", "event", "data"):
                fields[name] = value[1:] if value.startswith(" ") else value
        if "event" in fields:
            fields["data"] = json.loads(fields["data"])
            out.append(fields)
    return out


def test_run_stream_resumes_and_ends(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        version = await kit.version(run_id, call_id)
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": version},
            json={"decision": "approved"},
        )
        assert r.status_code == 200
        r = await kit.get(f"/v1/runs/{run_id}/stream", "viewer")
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _events(r.text)
        assert [int(e["id"]) for e in events] == list(range(1, len(events) + 1))
        kinds = [e["event"] for e in events]
        assert "approval_requested" in kinds and "approval_decided" in kinds
        assert events[-1]["data"]["data"]["to"] == "completed"
        r = await kit.client.get(
            f"/v1/runs/{run_id}/stream", headers={**kit.auth("viewer"), "Last-Event-ID": "3"}
        )
        assert [e["id"] for e in _events(r.text)] == [e["id"] for e in events[3:]]
        r = await kit.get(f"/v1/runs/{run_id}/stream", "other")
        assert r.status_code == 404

    run(tmp_path, body)


def _read_until(lines: Any, count: int, deadline: float) -> list[dict[str, Any]]:
    text, got = "", []
    for line in lines:
        text += line + "\n"
        got = _events(text)
        if len(got) >= count or time.monotonic() > deadline:
            break
    return got


def test_inbox_stream_of_a_running_server(tmp_path: Path) -> None:
    with serve_process(tmp_path) as served:
        viewer = {"Authorization": f"Bearer {served.token('viewer', 'watcher')}"}
        operator = {"Authorization": f"Bearer {served.token('admin', 'boss')}"}
        url = served.url
        with httpx.Client(base_url=url, timeout=30) as c:
            with c.stream("GET", "/v1/approvals/stream", headers=viewer) as stream:
                lines = stream.iter_lines()
                [snapshot] = _read_until(lines, 1, time.monotonic() + 10)
                assert snapshot["event"] == "snapshot" and snapshot["data"]["approvals"] == []
                r = c.post("/v1/runs", headers=operator,
                           json={"agent": "refund-desk", "input": "Refund A-1001"})  # fmt: skip
                run_id = r.json()["id"]
                got = _read_until(lines, 1, time.monotonic() + 20)
                [requested] = got
                assert requested["event"] == "approval_requested"
                assert requested["data"]["runId"] == run_id
                call_id, version = requested["data"]["toolCallId"], requested["data"]["version"]
                r = c.post(f"/v1/approvals/{run_id}/{call_id}/decision",
                           headers={**operator, "If-Match": version},
                           json={"decision": "denied", "reason": "not today"})  # fmt: skip
                assert r.status_code == 200, r.text
                got = _read_until(lines, 2, time.monotonic() + 20)
                assert [e["event"] for e in got] == ["approval_decided", "run_status"]
                assert got[0]["data"]["decision"] == "denied"
                assert got[0]["data"]["decidedBy"] == "boss"
            resume = {**viewer, "Last-Event-ID": requested["id"]}
            with c.stream("GET", "/v1/approvals/stream", headers=resume) as stream:
                lines = stream.iter_lines()
                again = _read_until(lines, 2, time.monotonic() + 10)
                assert [e["id"] for e in again] == [e["id"] for e in got]
                started = time.monotonic()
                served.process.send_signal(signal.SIGTERM)
                rest = list(lines)  # the stream ends; no error
                assert all(not line.startswith("event") for line in rest)
        assert served.process.wait(timeout=20) == 0
        assert time.monotonic() - started < 15


def test_webhooks_signed_and_retried(tmp_path: Path) -> None:
    secret = b"s3cret-of-demo"
    seen: list[httpx.Request] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(500 if len(seen) <= 2 else 204)

    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        version = await kit.version(run_id, call_id)
        deadline = time.monotonic() + 20
        while len(seen) < 3:  # the request, told after two failures
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": version},
            json={"decision": "approved"},
        )
        assert r.status_code == 200
        while kit.app.state.webhooks.delivered < 2:
            assert time.monotonic() < deadline, [x.content for x in seen]
            await asyncio.sleep(0.05)
        assert len(seen) == 4  # two failures of the first, then both delivered
        kinds = []
        for request in seen:
            sig = dict(p.split("=", 1) for p in request.headers["oarlock-signature"].split(","))
            mac = hmac.new(secret, f"{sig['t']}.".encode() + request.content, hashlib.sha256)
            assert hmac.compare_digest(sig["v1"], mac.hexdigest())
            assert abs(int(sig["t"]) - time.time()) < 60
            event = json.loads(request.content)
            assert event["tenant"] == "demo"
            kinds.append(event["type"])
        assert kinds == ["approval_requested"] * 3 + ["approval_decided"]
        decided = json.loads(seen[-1].content)["data"]
        assert decided["decision"] == "approved" and decided["decidedBy"] == "approver-ana"
        assert secret not in b"".join(x.content for x in seen)

    settings = ServerSettings(
        worker_settings=WorkerSettings(poll=0.05, heartbeat=0.2, lease=1.0, drain=2.0),
        watch_interval=0.1,
        webhooks=(Webhook("demo", "https://hooks.example/oarlock", secret),),
        webhook_transport=httpx.MockTransport(receiver),
    )
    assert "s3cret" not in repr(dataclasses.replace(settings))
    run(tmp_path, body, settings=settings)
