"""MCP servers as governed tools, against real server processes (stdio and streamable HTTP)
built with the mcp SDK: listing, side-effect classes, calls through the governed executor,
server crashes and restarts, hanging calls, servers that do not start, and a whole run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest

from oarlock.errors import ConfigError, ToolError
from oarlock.formats._models import ToolCallPart, ToolResultPart
from oarlock.governance import (
    CallContext,
    GovernedExecutor,
    MemoryGovernanceStore,
    RulePolicy,
    StoredReceipt,
    unfence,
)
from oarlock.tools import Tool, ToolArgumentsError
from oarlock.tools._mcp import (
    MCPServerConfig,
    MCPTools,
    connect_mcp,
    result_text,
    side_effect_for,
)

pytestmark = pytest.mark.timeout(90)

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
TOOLS_SERVER = str(SERVERS / "tools_server.py")
PAGED_SERVER = str(SERVERS / "paged_server.py")
CTX = CallContext("run-mcp", "agent", {"tenantId": "acme"}, 1)
ALLOW_W = RulePolicy.from_dict(
    {
        "policy": "mcp-test",
        "rules": [{"id": "allow-w", "effect": "allow", "match": {"tool": "w.*"}}],
    }
)


def stdio(name: str = "srv", **kw: Any) -> MCPServerConfig:
    return MCPServerConfig(name, command=[sys.executable, TOOLS_SERVER], **kw)


def by_name(mcp: MCPTools) -> dict[str, Tool]:
    return {t.name: t for t in mcp.tools}


def alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    # the process may be reaped between the signal and the read: ESRCH, or no file
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


async def gone(*pids: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return not any(alive(p) for p in pids)


def no_other_tasks() -> bool:
    return asyncio.all_tasks() == {asyncio.current_task()}


@contextlib.asynccontextmanager
async def connected(*configs: MCPServerConfig) -> AsyncIterator[MCPTools]:
    """Connect, and on the way out close and check that no task is left behind."""
    mcp = await connect_mcp(list(configs))
    try:
        yield mcp
    finally:
        await mcp.aclose()
    assert no_other_tasks()


async def execute(
    executor: GovernedExecutor, tool: Tool, arguments: dict[str, Any], call_id: str
) -> ToolResultPart:
    call = ToolCallPart(type="tool_call", id=call_id, name=tool.name, arguments=arguments)
    return await executor.execute(tool, call, tool.validate_arguments(arguments), CTX)


async def latest(store: MemoryGovernanceStore) -> StoredReceipt:
    return (await store.receipts(limit=1))[0]


async def server_pid(tool: Tool) -> int:
    return int(await tool.call({}))


# -- configuration and mapping (no server) ------------------------------------------------
def test_config_from_an_agent_file_mapping(tmp_path: Path) -> None:
    cfg = MCPServerConfig.from_dict(
        "github",
        {
            "command": ["npx", "-y", "server-github"],
            "env": {"GITHUB_TOKEN": "t"},
            "cwd": "work",
            "side_effects": {"create_pr": "external"},
            "needs_approval": {"search": True},
            "timeout_seconds": 30,
        },
        base_dir=tmp_path,
    )
    assert cfg.command == ["npx", "-y", "server-github"]
    assert cfg.cwd == str(tmp_path / "work")
    assert cfg.side_effects == {"create_pr": "external"}
    http = MCPServerConfig.from_dict("remote", {"url": "https://x.test/mcp", "headers": {"A": "b"}})
    assert (http.url, http.headers, http.command) == ("https://x.test/mcp", {"A": "b"}, None)


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("gh", {"command": "npx server"}, "mcp_servers.gh.command: expected a list"),
        ("gh", {"command": ["npx"], "url": "http://x"}, "exactly one of command"),
        ("gh", {}, "exactly one of command"),
        ("gh", {"command": ["npx"], "colour": 1}, "mcp_servers.gh.colour: unknown key"),
        ("gh", {"command": ["npx"], "side_effects": {"a": "write"}}, "side_effects.a: unknown"),
        ("gh", {"command": ["npx"], "default_side_effect": "big"}, "default_side_effect: unk"),
        ("gh", {"command": ["npx"], "needs_approval": {"a": "yes"}}, "needs_approval.a: exp"),
        ("gh", {"command": ["npx"], "timeout_seconds": 0}, "timeout_seconds: expected a pos"),
        ("gh", {"command": ["npx"], "env": {"A": 1}}, "mcp_servers.gh.env.A: expected a str"),
        ("gh", {"url": "ftp://x"}, "mcp_servers.gh.url: expected an http"),
        ("gh", {"url": "http://x", "env": {}}, "env and cwd are for a command"),
        ("gh", {"command": ["npx"], "max_restarts": -1}, "max_restarts"),
        ("g h", {"command": ["npx"]}, "server name 'g h'"),
        ("gh", {"command": ["npx"], "trust_hints": "no"}, "trust_hints: expected true"),
    ],
)
def test_config_errors_name_the_key(name: str, data: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        MCPServerConfig.from_dict(name, data)
    assert says in str(err.value)


def _tool(**hints: bool) -> mt.Tool:
    annotations = mt.ToolAnnotations(**hints) if hints else None
    return mt.Tool(name="t", input_schema={"type": "object"}, annotations=annotations)


@pytest.mark.parametrize(
    ("hints", "cls"),
    [
        ({}, "spend"),
        ({"read_only_hint": True}, "read"),
        ({"read_only_hint": True, "destructive_hint": True}, "read"),
        ({"read_only_hint": False}, "spend"),
        ({"destructive_hint": True}, "spend"),
        ({"open_world_hint": True}, "external"),
        ({"open_world_hint": True, "destructive_hint": False}, "external"),
        ({"open_world_hint": True, "destructive_hint": True}, "spend"),
        ({"open_world_hint": False, "destructive_hint": False}, "spend"),
    ],
)
def test_side_effect_class_from_annotations(hints: dict[str, bool], cls: str) -> None:
    assert side_effect_for(MCPServerConfig("s", command=["x"]), _tool(**hints)) == cls


def test_overrides_the_default_and_distrust_of_hints() -> None:
    read = _tool(read_only_hint=True)
    assert (
        side_effect_for(MCPServerConfig("s", command=["x"], side_effects={"t": "production"}), read)
        == "production"
    )
    assert (
        side_effect_for(MCPServerConfig("s", command=["x"], default_side_effect="sandbox"), _tool())
        == "sandbox"
    )
    assert (
        side_effect_for(MCPServerConfig("s", command=["x"], default_side_effect="sandbox"), read)
        == "read"
    )
    distrust = MCPServerConfig("s", command=["x"], trust_hints=False)
    assert side_effect_for(distrust, read) == "spend"


def test_result_text_joins_text_and_notes_everything_else() -> None:
    result = mt.CallToolResult(
        content=[
            mt.TextContent(text="one"),
            mt.ImageContent(data="AA==", mime_type="image/png"),
            mt.AudioContent(data="AA==", mime_type="audio/wav"),
            mt.ResourceLink(name="r", uri="file:///r.txt"),
            mt.EmbeddedResource(resource=mt.TextResourceContents(uri="file:///a", text="inside")),
            mt.EmbeddedResource(
                resource=mt.BlobResourceContents(uri="file:///b", blob="AA==", mime_type="app/x")
            ),
            mt.TextContent(text="two"),
        ],
        structured_content={"ignored": "there is text"},
    )
    assert result_text(result).split("\n") == [
        "one",
        "[image: image/png]",
        "[audio: audio/wav]",
        "[resource link: file:///r.txt]",
        "[resource: file:///a]",
        "inside",
        "[resource: file:///b (app/x)]",
        "two",
    ]
    structured = mt.CallToolResult(content=[], structured_content={"n": 1})
    assert result_text(structured) == '{"n": 1}'


# -- listing ------------------------------------------------------------------------------
async def test_listing_names_descriptions_schemas_and_classes() -> None:
    strict = stdio(
        "strict",
        trust_hints=False,
        default_side_effect="shared-write",
        side_effects={"add": "read", "post": "publication"},
        needs_approval={"add": True},
        timeout_seconds=5,
    )
    paged = MCPServerConfig("pg", command=[sys.executable, PAGED_SERVER])
    async with connected(stdio(), strict, paged) as mcp:
        tools = by_name(mcp)
        srv = {n.split(".", 1)[1]: t for n, t in tools.items() if n.startswith("srv.")}
        assert set(srv) == {
            "add",
            "delete_file",
            "post",
            "fail",
            "check_token",
            "slow",
            "crash",
            "picture",
            "pid",
        }
        add = srv["add"]
        assert add.description == "Add two integers."
        assert add.mcp_server_id == "srv"
        assert add.parameters["required"] == ["a", "b"]
        assert add.parameters["properties"]["a"]["type"] == "integer"
        assert add.spec() == {
            "name": "srv.add",
            "description": "Add two integers.",
            "parameters": add.parameters,
        }
        assert add.schema_version.startswith("mcp:")
        classes = {name: t.side_effect for name, t in srv.items()}
        assert classes == {
            "add": "read",  # readOnlyHint
            "delete_file": "spend",  # destructiveHint: the cautious class
            "post": "external",  # openWorldHint only
            "fail": "read",
            "check_token": "read",
            "slow": "read",
            "crash": "read",
            "picture": "read",
            "pid": "spend",  # no annotations
        }
        strict_classes = {
            n.split(".", 1)[1]: t.side_effect for n, t in tools.items() if n.startswith("strict.")
        }
        assert strict_classes["add"] == "read"  # the override
        assert strict_classes["post"] == "publication"
        assert strict_classes["delete_file"] == strict_classes["slow"] == "shared-write"
        assert tools["strict.add"].needs_approval is True
        assert tools["strict.add"].timeout_seconds == 5
        assert tools["srv.add"].timeout_seconds is None
        # every page of a paginated listing, unannotated tools, a title for a description
        pg = {n: t for n, t in tools.items() if n.startswith("pg.")}
        assert set(pg) == {"pg.lookup", "pg.store", "pg.forget"}
        assert {t.side_effect for t in pg.values()} == {"spend"}
        assert pg["pg.forget"].description == "Forget a key"
        assert await pg["pg.lookup"].call({"key": "k"}) == '{"tool": "lookup", "key": "k"}'


# -- calling through the governed executor --------------------------------------------------
async def test_calls_through_the_governed_executor_carry_the_server_id() -> None:
    store = MemoryGovernanceStore()
    executor = GovernedExecutor(store)
    async with connected(stdio()) as mcp:
        tools = by_name(mcp)
        result = await execute(executor, tools["srv.add"], {"a": 2, "b": 40}, "c1")
        assert not result.is_error and unfence(result.content) == "42"
        item = await latest(store)
        assert item.status == "Succeeded"
        assert item.invocation["mcpServerId"] == "srv"
        assert item.invocation["toolId"] == "srv.add"
        assert item.invocation["arguments"] == {"a": 2, "b": 40}
        assert item.invocation["sideEffectClass"] == "read"

        picture = await execute(executor, tools["srv.picture"], {}, "c2")
        assert unfence(picture.content) == "[image: image/png]"

        failed = await execute(executor, tools["srv.fail"], {}, "c3")
        assert failed.is_error and "the tool failed on purpose" in failed.content
        item = await latest(store)
        assert item.status == "Failed"
        assert item.receipt["error"]["code"] == "mcp_tool_error"
        assert "the tool failed on purpose" in item.receipt["error"]["message"]
        assert item.invocation["mcpServerId"] == "srv"

        # a call the default policy holds for a human: a spend-class MCP tool
        held = await execute(executor, tools["srv.delete_file"], {"path": "/tmp/x"}, "c4")
        assert held.is_error and "needs an approval" in held.content
        assert (await latest(store)).status == "Denied"

        # arguments are checked against the input schema before anything is sent
        add = tools["srv.add"]
        assert add.validate_arguments({"a": 1, "b": 2}) == {"a": 1, "b": 2}
        with pytest.raises(ToolArgumentsError) as err:
            add.validate_arguments({"a": "one"})
        text = str(err.value)
        assert text.startswith("invalid arguments for tool 'srv.add': ")
        assert "a: 'one' is not of type 'integer'" in text
        assert "arguments: 'b' is a required property" in text
        with pytest.raises(ToolArgumentsError):
            add.validate_arguments({"a": 1.5, "b": 2})


# -- crashes ------------------------------------------------------------------------------
async def test_a_crash_fails_a_read_call_and_the_server_is_restarted_within_a_limit() -> None:
    store = MemoryGovernanceStore()
    executor = GovernedExecutor(store)
    config = stdio(side_effects={"pid": "read"}, max_restarts=1, restart_window_seconds=60)
    async with connected(config) as mcp:
        tools = by_name(mcp)
        first = await server_pid(tools["srv.pid"])
        crashed = await execute(executor, tools["srv.crash"], {}, "k1")
        assert crashed.is_error
        item = await latest(store)
        assert item.status == "Failed"
        assert item.receipt["error"]["code"] == "mcp_server_crashed"
        assert "stopped during the call of tool 'crash'" in item.receipt["error"]["message"]
        assert "crash: going down now" in item.receipt["error"]["message"]  # its stderr
        assert await gone(first)

        again = await execute(executor, tools["srv.add"], {"a": 1, "b": 1}, "k2")
        assert unfence(again.content) == "2"
        second = await server_pid(tools["srv.pid"])
        assert second != first

        # the second crash exhausts max_restarts=1: no further restart within the window
        await execute(executor, tools["srv.crash"], {}, "k3")
        refused = await execute(executor, tools["srv.add"], {"a": 1, "b": 1}, "k4")
        assert refused.is_error
        item = await latest(store)
        assert item.status == "Failed"
        assert item.receipt["error"]["code"] == "mcp_server_unavailable"
        assert await gone(second)


async def test_a_crash_during_a_side_effecting_call_is_an_error_with_a_receipt() -> None:
    store = MemoryGovernanceStore()
    executor = GovernedExecutor(store, policy=ALLOW_W)
    async with connected(stdio("w", side_effects={"crash": "external"})) as mcp:
        crash = by_name(mcp)["w.crash"]
        assert crash.side_effect == "external"
        result = await execute(executor, crash, {}, "x1")
        assert result.is_error
        item = await latest(store)
        assert item.receipt["error"]["code"] == "mcp_server_crashed"
        assert item.invocation["approvalId"]  # the policy's standing approval
        # the server may have acted before it died: the outcome is unknown
        assert item.status == "Uncertain"


async def test_a_crash_during_a_side_effecting_call_should_be_uncertain() -> None:
    store = MemoryGovernanceStore()
    executor = GovernedExecutor(store, policy=ALLOW_W)
    async with connected(stdio("w", side_effects={"crash": "external"})) as mcp:
        result = await execute(executor, by_name(mcp)["w.crash"], {}, "u1")
        assert "outcome of tool 'w.crash' is unknown" in result.content
        assert (await latest(store)).status == "Uncertain"


# -- hanging calls ------------------------------------------------------------------------
async def test_a_hanging_call_times_out_and_the_connection_stays_usable() -> None:
    store = MemoryGovernanceStore()
    executor = GovernedExecutor(store, policy=ALLOW_W)
    read = stdio("r", timeout_seconds=0.5, side_effects={"pid": "read"})
    write = stdio("w", timeout_seconds=0.5, side_effects={"slow": "external", "pid": "read"})
    async with connected(read, write) as mcp:
        tools = by_name(mcp)
        pids = [await server_pid(tools["r.pid"]), await server_pid(tools["w.pid"])]
        baseline = asyncio.all_tasks()

        started = time.monotonic()
        timed_out = await execute(executor, tools["r.slow"], {"seconds": 30}, "h1")
        assert time.monotonic() - started < 5
        assert timed_out.is_error and "timed out" in timed_out.content
        item = await latest(store)
        assert item.status == "TimedOut" and item.receipt["error"]["code"] == "timeout"
        assert item.invocation["mcpServerId"] == "r"

        uncertain = await execute(executor, tools["w.slow"], {"seconds": 30}, "h2")
        assert "is unknown" in uncertain.content
        item = await latest(store)
        assert item.status == "Uncertain" and item.invocation["sideEffectClass"] == "external"

        # the cancelled calls left both connections usable, on the same processes
        for server in ("r", "w"):
            ok = await execute(executor, tools[f"{server}.add"], {"a": 5, "b": 5}, f"h3{server}")
            assert unfence(ok.content) == "10"
        assert [await server_pid(tools["r.pid"]), await server_pid(tools["w.pid"])] == pids

        # a call cancelled from outside (not by a timeout) is as clean
        call = asyncio.create_task(tools["r.slow"].call({"seconds": 30}))
        await asyncio.sleep(0.3)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await tools["r.add"].call({"a": 1, "b": 2}) == "3"
        assert asyncio.all_tasks() == baseline  # nothing left behind by the cancellations
    assert await gone(*pids)


# -- servers that do not start ------------------------------------------------------------
async def test_a_server_that_does_not_start_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as err:
        await connect_mcp([MCPServerConfig("nope", command=["oarlock-no-such-mcp-server"])])
    assert err.value.code == "mcp_start_failed"
    assert "MCP server 'nope' (oarlock-no-such-mcp-server) did not start" in str(err.value)
    assert "FileNotFoundError" in str(err.value)

    script = "import sys; sys.stderr.write('boom: missing API key\\n'); sys.exit(3)"
    with pytest.raises(ToolError) as err:
        await connect_mcp([MCPServerConfig("dies", command=[sys.executable, "-c", script])])
    assert err.value.code == "mcp_start_failed"
    assert "boom: missing API key" in str(err.value)  # the end of its stderr

    pid_file = tmp_path / "pid"
    mute = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    with pytest.raises(ToolError) as err:
        await connect_mcp(
            [
                MCPServerConfig(
                    "mute", command=[sys.executable, "-c", mute], start_timeout_seconds=0.5
                )
            ]
        )
    assert err.value.code == "mcp_start_failed"
    assert "no answer to initialize within 0.5 s" in str(err.value)
    assert await gone(int(pid_file.read_text()))

    with pytest.raises(ToolError) as err:
        await connect_mcp([MCPServerConfig("web", url=f"http://127.0.0.1:{free_port()}/mcp")])
    assert err.value.code == "mcp_start_failed"
    assert "/mcp) did not start: ConnectError" in str(err.value)
    assert no_other_tasks()


async def test_one_failing_server_stops_the_others_and_overrides_must_name_real_tools() -> None:
    with pytest.raises(ConfigError) as err:
        await connect_mcp([stdio(side_effects={"create_pr": "external"})])
    assert "mcp_servers.srv.side_effects.create_pr: the server has no such tool" in str(err.value)
    assert no_other_tasks()
    with pytest.raises(ToolError):
        await connect_mcp([stdio("ok"), MCPServerConfig("bad", command=["oarlock-no-such"])])
    assert no_other_tasks()


# -- streamable HTTP ----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, TOOLS_SERVER, "--http", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


async def test_a_streamable_http_server_lists_and_calls(http_server: str) -> None:
    store = MemoryGovernanceStore()
    config = MCPServerConfig("web", url=http_server, headers={"X-Test": "1"})
    async with connected(config) as mcp:
        tools = by_name(mcp)
        assert tools["web.add"].side_effect == "read"
        assert tools["web.post"].side_effect == "external"
        result = await execute(GovernedExecutor(store), tools["web.add"], {"a": 20, "b": 22}, "w1")
        assert unfence(result.content) == "42"
        item = await latest(store)
        assert item.status == "Succeeded" and item.invocation["mcpServerId"] == "web"

        # the server process dies mid-call: a crash; reconnecting then finds nobody there
        with pytest.raises(ToolError) as err:
            await tools["web.crash"].call({})
        assert err.value.code == "mcp_server_crashed"
        assert http_server in str(err.value)
        with pytest.raises(ToolError) as err:
            await tools["web.add"].call({"a": 1, "b": 1})
        assert err.value.code == "mcp_start_failed" and "ConnectError" in str(err.value)


# -- a whole run --------------------------------------------------------------------------
async def test_an_agent_run_calls_an_mcp_tool_and_completes() -> None:
    from oarlock.engine import Agent, Runner
    from oarlock.models import ScriptedModel
    from oarlock.testing import MemoryStore

    model = ScriptedModel(
        [
            {"tool_calls": [{"id": "t1", "name": "srv.add", "arguments": {"a": 19, "b": 23}}]},
            {"text": "19 + 23 = 42"},
        ]
    )
    store = MemoryStore()
    async with connected(stdio()) as mcp:
        agent = Agent("mcp-agent", model, tools=mcp.tools)
        doc = await Runner(agent, store).start("What is 19 + 23?")
    assert doc.status == "completed"
    assert doc.result == "19 + 23 = 42"
    results = [
        p for m in doc.messages if m.role == "user" for p in m.content if p.type == "tool_result"
    ]
    assert len(results) == 1 and unfence(results[0].content) == "42"
    (item,) = await store.governance().receipts()
    assert item.status == "Succeeded" and item.invocation["mcpServerId"] == "srv"


# -- secrets --------------------------------------------------------------------------------
async def test_secrets_a_server_echoes_are_never_stored_or_raised() -> None:
    from oarlock.engine import Agent, Runner
    from oarlock.formats import dump_run
    from oarlock.models import ScriptedModel
    from oarlock.testing import MemoryStore

    token = "svc-tok-5Kq8Wm2Rx7LpZ"  # known only from the server's env setting
    model = ScriptedModel(
        [
            {"tool_calls": [{"id": "t1", "name": "srv.check_token", "arguments": {}}]},
            {"text": "The backend refused the token."},
        ]
    )
    store = MemoryStore()
    async with connected(stdio(env={"SERVICE_TOKEN": token})) as mcp:
        doc = await Runner(Agent("mcp-agent", model, tools=mcp.tools), store).start("check")
    assert doc.status == "completed"
    (result,) = doc.messages[2].content
    assert result.is_error and "the backend refused token [redacted]" in result.content  # type: ignore[union-attr]
    assert token not in json.dumps(dump_run(doc))
    (item,) = await store.governance().receipts()
    assert item.status == "Failed" and "[redacted]" in item.receipt["error"]["message"]
    assert token not in json.dumps(item.receipt)

    # a server that dies at start, printing its secret to stderr
    secret = "api-tok-9Hd3Vb6Nq1Ws"
    script = (
        "import os, sys; sys.stderr.write('bad ' + os.environ['API_TOKEN'] + '\\n'); sys.exit(3)"
    )
    config = MCPServerConfig(
        "dies", command=[sys.executable, "-c", script], env={"API_TOKEN": secret}
    )
    with pytest.raises(ToolError) as err:
        await connect_mcp([config])
    assert err.value.code == "mcp_start_failed"
    assert "bad [redacted]" in str(err.value) and secret not in str(err.value)


def test_the_secrets_of_an_http_server_config_are_registered() -> None:
    from oarlock._secrets import redact
    from oarlock.tools._mcp import MCPConnection

    token, password, key = "hdr-tok-3Zp8Lq5Xc2Vm", "url-pw-7Rt4Yk1Bn6", "qs-key-2Gh7Jm4Wd9"
    MCPConnection(
        MCPServerConfig(
            "web",
            url=f"https://desk:{password}@mcp.example.com/mcp?api_key={key}",
            headers={"Authorization": f"Bearer {token}", "X-Tenant": "acme-corporation-eu"},
        )
    )
    text = f"echo {token} {password} {key} acme-corporation-eu"
    assert redact(text) == "echo [redacted] [redacted] [redacted] acme-corporation-eu"
