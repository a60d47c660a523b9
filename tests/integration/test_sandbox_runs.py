"""``sandbox``-class calls in runs: the governed executor hands every one to the sandbox
runner; the invocation names the workspace and egress profile, the receipt what applied
(isolation, limits, exit status or signal, output kept and dropped); a call that cannot be
isolated as the policy requires is Denied and never runs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oarlock.engine import Agent, Runner
from oarlock.governance import GovernedExecutor, RulePolicy
from oarlock.governance._records import run_uuid
from oarlock.models import ScriptedModel
from oarlock.sandbox import SandboxRunner, Workspaces, python, read_file, shell, write_file
from oarlock.sandbox._host import HostSupport, host_support
from oarlock.testing import MemoryStore, ValidatingStore
from oarlock.tools import tool


@tool(side_effect="sandbox", sandbox={"limits": {"cpu_seconds": 1}})
def spin() -> str:
    """Spin the CPU forever."""
    while True:
        pass


@tool(side_effect="sandbox", sandbox={"egress": "host"})
def fetch(url: str) -> str:
    """Fetch a URL with the host's network."""
    return url


@tool(side_effect="sandbox", timeout_seconds=1)
def sleepy() -> str:
    """Sleep too long."""
    import time

    time.sleep(60)
    return "never"


@pytest.fixture
def workspaces() -> Iterator[Workspaces]:
    root = Path(tempfile.mkdtemp(prefix="oarlock-runs-test-", dir="/tmp"))
    root.chmod(0o711)
    yield Workspaces(root / "ws")
    shutil.rmtree(root, ignore_errors=True)


def drive(
    calls: list[dict[str, Any]],
    workspaces: Workspaces,
    *,
    tools: list[Any],
    policy: RulePolicy | None = None,
    support: HostSupport | None = None,
) -> tuple[Any, ValidatingStore]:
    import asyncio

    turns = [{"tool_calls": calls}, {"text": "done"}]
    agent = Agent("coder", ScriptedModel(turns), tools=tools, tenant="t", policy=policy)
    store = ValidatingStore(MemoryStore())  # every record checked against its schema
    executor = GovernedExecutor(
        store.governance(),
        policy=policy,
        sandbox=SandboxRunner(workspaces, support=support),
    )
    doc = asyncio.run(Runner(agent, store, executor=executor).start("go"))
    return doc, store


def receipts(store: ValidatingStore, doc: Any) -> dict[str, Any]:
    import asyncio

    items = asyncio.run(store.governance().receipts(run_id=run_uuid(doc.id)))
    return {i.invocation["toolId"]: i for i in items}


def test_built_in_tools_run_in_the_runs_workspace(workspaces: Workspaces) -> None:
    calls = [
        {
            "name": "sandbox.write_file",
            "arguments": {"path": "main.py", "content": "print(40 + 2)"},
        },
    ]
    doc, store = drive(calls, workspaces, tools=[shell, python, read_file, write_file])
    assert doc.status == "completed"
    turns = [
        {"tool_calls": [{"name": "sandbox.shell", "arguments": {"command": "python3 main.py"}}]},
    ]
    doc2, store2 = drive(turns[0]["tool_calls"], workspaces, tools=[shell])
    # each run has a workspace of its own: the second run does not see the first's file
    result = doc2.messages[2].content[0]
    assert "No such file" in result.content or "can't open file" in result.content
    item = receipts(store, doc)["sandbox.write_file"]
    assert item.invocation["sandbox"] == {
        "workspaceId": run_uuid(doc.id), "egressProfile": "none", "isolation": "workspace"
    }  # oarlock's own confined write: no program started
    assert (workspaces.root / run_uuid(doc.id) / "main.py").read_text() == "print(40 + 2)"
    ran = receipts(store2, doc2)["sandbox.shell"]
    usage = ran.receipt["usage"]["sandbox"]
    assert usage["isolation"] == host_support().strongest == "bubblewrap"
    assert usage["egressProfile"] == "none" and usage["exitCode"] == 2
    assert usage["limits"]["cpuSeconds"] == 10 and "droppedBytes" in usage


def test_a_limit_that_stops_the_call_leaves_its_code_on_the_receipt(
    workspaces: Workspaces,
) -> None:
    doc, store = drive([{"name": "spin", "arguments": {}}], workspaces, tools=[spin])
    item = receipts(store, doc)["spin"]
    assert item.status == "Failed" and item.receipt["error"]["code"] == "cpu_limit"
    assert item.receipt["usage"]["sandbox"]["signal"] == "SIGXCPU"
    assert doc.messages[2].content[0].is_error


def test_a_call_past_its_timeout_is_timed_out_and_killed(workspaces: Workspaces) -> None:
    doc, store = drive([{"name": "sleepy", "arguments": {}}], workspaces, tools=[sleepy])
    item = receipts(store, doc)["sleepy"]
    assert item.status == "TimedOut" and item.receipt["error"]["code"] == "timeout"
    assert item.receipt["usage"]["sandbox"]["limits"]["timeoutSeconds"] == 1


def test_a_host_that_cannot_isolate_refuses_the_call(workspaces: Workspaces) -> None:
    none = HostSupport(bubblewrap=False, unshare=False, drop_user=False)
    calls = [{"name": "sandbox.shell", "arguments": {"command": "touch ran"}}]
    doc, store = drive(calls, workspaces, tools=[shell], support=none)
    item = receipts(store, doc)["sandbox.shell"]
    assert item.status == "Denied" and item.receipt["error"]["code"] == "sandbox_unavailable"
    assert not (workspaces.root / run_uuid(doc.id) / "ran").exists()


def test_a_policy_that_requires_bubblewrap_refuses_a_weaker_sandbox(
    workspaces: Workspaces,
) -> None:
    policy = RulePolicy.from_dict(
        {
            "policy": "p",
            "rules": [
                {"id": "strict", "effect": "allow", "sandbox": {"isolation": "bubblewrap"},
                 "match": {"class": "sandbox"}},
            ],
        }
    )  # fmt: skip
    weak = HostSupport(bubblewrap=False, unshare=True, drop_user=True)
    calls = [{"name": "sandbox.shell", "arguments": {"command": "true"}}]
    doc, store = drive(calls, workspaces, tools=[shell], policy=policy, support=weak)
    item = receipts(store, doc)["sandbox.shell"]
    assert item.receipt["error"]["code"] == "sandbox_unavailable"
    assert "requires bubblewrap" in item.receipt["error"]["message"]


def test_the_hosts_network_is_granted_only_by_a_policy_rule(workspaces: Workspaces) -> None:
    calls = [{"name": "fetch", "arguments": {"url": "http://example.com"}}]
    doc, store = drive(calls, workspaces, tools=[fetch])
    item = receipts(store, doc)["fetch"]
    assert item.status == "Denied" and item.receipt["error"]["code"] == "egress_not_granted"
    policy = RulePolicy.from_dict(
        {
            "policy": "p",
            "rules": [{"id": "net", "effect": "allow", "sandbox": {"egress": "host"},
                       "match": {"tool": "fetch"}}],
        }
    )  # fmt: skip
    doc, store = drive(calls, workspaces, tools=[fetch], policy=policy)
    item = receipts(store, doc)["fetch"]
    assert item.status == "Succeeded", item.receipt
    assert item.invocation["sandbox"]["egressProfile"] == "host"
    assert item.receipt["usage"]["sandbox"]["egressProfile"] == "host"


def test_a_policy_rule_with_sandbox_settings_is_checked() -> None:
    from oarlock.errors import ConfigError

    for bad, fragment in (
        ({"egress": "wide"}, "sandbox.egress"),
        ({"isolation": "chroot"}, "sandbox.isolation"),
        ({"network": "x"}, "unknown key"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            RulePolicy.from_dict(
                {"policy": "p", "rules": [{"id": "r", "effect": "allow", "sandbox": bad}]}
            )
    with pytest.raises(ConfigError, match="a deny rule runs nothing"):
        RulePolicy.from_dict(
            {"policy": "p", "rules": [{"id": "r", "effect": "deny", "sandbox": {}}]}
        )


def test_the_example_coder_agent_answers_by_running_a_program(
    workspaces: Workspaces, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from oarlock.cli import main

    monkeypatch.setenv("OARLOCK_WORKSPACES", str(workspaces.root))
    agent = Path(__file__).parents[2] / "examples" / "agents" / "coder.yaml"
    db = str(tmp_path / "runs.db")
    assert main(["--db", db, "run", str(agent), "How many primes are there below 10,000?"]) == 0
    assert main(["--db", db, "audit", "verify"]) == 0
    [run] = [p.name for p in workspaces.root.iterdir()]
    assert (workspaces.root / run / "primes.py").exists()
    assert main(["sandbox", "list", "--workspaces", str(workspaces.root)]) == 0
    assert main(["sandbox", "show", run, "primes.py", "--workspaces", str(workspaces.root)]) == 0
    assert main(["sandbox", "show", run, "../x", "--workspaces", str(workspaces.root)]) == 1
    assert main(["sandbox", "check"]) == 0
    assert (
        main(["sandbox", "prune", "--older-than", "0", "--workspaces", str(workspaces.root)]) == 0
    )
    assert list(workspaces.root.iterdir()) == []


def test_agent_file_sandbox_settings_apply_and_are_checked(tmp_path: Path) -> None:
    from oarlock.engine._agentfile import check_agent_file, load_agent

    script = Path(__file__).parents[2] / "examples" / "agents" / "coder.script.yaml"
    good = tmp_path / "good.yaml"
    good.write_text(
        f"name: c\nmodel: scripted:{script}\ntools:\n"
        "  - path: oarlock.sandbox:shell\n"
        "    sandbox: {egress: allowlist, limits: {cpu_seconds: 3}, allow_hosts: ['x:1']}\n"
        "sandbox: {isolation: bubblewrap, limits: {timeout_seconds: 9}, workspaces: ws}\n"
    )
    agent = load_agent(good)
    shell_tool = agent.tools.get("sandbox.shell")
    assert shell_tool is not None and shell_tool.sandbox is not None
    assert shell_tool.sandbox.program is not None  # the built-in keeps its program
    assert (shell_tool.sandbox.egress, shell_tool.sandbox.allow_hosts) == ("allowlist", ("x:1",))
    assert agent.sandbox is not None and agent.sandbox.isolation == "bubblewrap"
    assert agent.sandbox.limits.timeout_seconds == 9
    assert agent.sandbox.workspaces.root == tmp_path / "ws"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"name: c\nmodel: scripted:{script}\ntools:\n"
        "  - path: oarlock.sandbox:shell\n    sandbox: {egress: everywhere}\n"
        "sandbox: {isolation: chroot, limits: {nope: 1}}\n"
    )
    problems = [str(p) for p in check_agent_file(bad).problems.items]
    assert any("tools[0].sandbox" in p and "everywhere" in p for p in problems), problems
    assert any(p.startswith(f"{bad}: sandbox") for p in problems), problems
