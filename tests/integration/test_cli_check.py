"""``oarlock check AGENT_FILE``: every problem of an agent file, its tools, model, policy
and MCP servers at once (exit 1); a summary when there is none (exit 0); 2 for a usage
error. MCP servers are real processes, started and listed within ``--timeout``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from oarlock.cli import main

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "integration" / "mcp_servers" / "tools_server.py"
DEMO = ROOT / "src" / "oarlock" / "demo" / "refund-desk.yaml"
POLICY = ROOT / "examples" / "policy" / "refund-policy.yaml"


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(folder: Path, text: str, name: str = "agent.yaml") -> Path:
    (folder / "s.yaml").write_text("- text: hi\n")
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_valid_agent_file_gives_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    from oarlock.governance import RulePolicy

    code, out, err = check(capsys, str(DEMO))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{DEMO}: ok",
        "  agent   refund-desk (tenant demo)",
        "  model   scripted:refund-desk",
        "  policy  none: the default (read and sandbox calls run, the others need an approval)",
        "  approve signed by the deciding process, or the user's approvers file",
        "  limits  max_turns 8, max_cost_usd 0.25",
        "  tools   3",
        "    lookup_order   read",
        "    refund_policy  read",
        "    issue_refund   spend, needs approval",
    ]
    version = RulePolicy.from_file(POLICY).version
    agent = ROOT / "examples" / "agents" / "refund-desk-openai.yaml"
    code, out, _ = check(capsys, str(agent))
    assert code == 0
    assert f"  policy  refund-desk, version {version}" in out.splitlines()


def test_every_problem_is_reported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "broken_tools.py").write_text("def f(:\n")
    path = write(
        tmp_path,
        """\
        name: ''
        model: scripted:s.yaml
        limits: {max_cost_usd: .nan}
        tenant: [1, 2]
        policy: nowhere.yaml
        tools: [broken_tools:f]
        mcp_servers:
          bad: {url: ftp://x}
        """,
    )
    code, out, _ = check(capsys, str(path))
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{path}: 6 problems"
    assert lines[1:] == [
        f"  {path}: name: must be a non-empty string, got ''",
        f"  {path}: tenant: must be a non-empty string, got a list",
        f"  {path}: limits.max_cost_usd: must be a finite number ≥ 0, got nan",
        f"  {path}: policy: {tmp_path / 'nowhere.yaml'}: no such policy file",
        f"  {path}: tools[0].path: cannot import 'broken_tools': syntax error in "
        "broken_tools.py, line 1: invalid syntax",
        f"  {path}: mcp_servers.bad.url: expected an http:// or https:// URL",
    ]


def test_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = check(capsys, str(tmp_path / "none.yaml"))
    assert code == 2
    assert "no such agent file" in err
    for timeout in ("0", "nan", "-1", "inf"):
        code, _, err = check(capsys, "--timeout", timeout, str(DEMO))
        assert code == 2
        assert "--timeout must be a number of seconds above 0" in err
    with pytest.raises(SystemExit) as info:
        main(["check"])
    assert info.value.code == 2


def test_a_yaml_bomb_is_one_problem_found_fast(tmp_path: Path) -> None:
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(levels) + "\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert time.monotonic() - started < 30
    assert done.returncode == 1
    assert f"{path}: line 1, column 4: anchors (&a) are not allowed" in done.stdout
    assert "Traceback" not in done.stderr


def test_mcp_servers_are_started_and_listed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        f"""\
        name: mcp
        model: scripted:s.yaml
        tools: [oarlock.demo.refund_desk:lookup_order]
        mcp_servers:
          t:
            command: [python, {json.dumps(str(SERVER))}]
            side_effects: {{post: shared-write}}
        """,
    )
    code, out, err = check(capsys, str(path))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    start = lines.index(f"  mcp     t (python {SERVER}): 9 tools")
    listed = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[start + 1 :]}
    assert listed["t.add"] == "read"
    assert listed["t.post"] == "shared-write, needs approval"
    assert listed["t.delete_file"] == "spend, needs approval"
    code, out, _ = check(capsys, "--no-connect", str(path))
    assert code == 0
    assert f"  mcp     t (python {SERVER}): not started (--no-connect)" in out.splitlines()


def test_mcp_problems_are_reported_with_the_others(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        f"""\
        name: mcp
        model: scripted:s.yaml
        limits: {{max_turns: -1}}
        tools:
          - {{path: oarlock.demo.refund_desk:lookup_order, name: t.add}}
        mcp_servers:
          t:
            command: [python, {json.dumps(str(SERVER))}]
            side_effects: {{nope: read}}
          gone:
            command: [oarlock-no-such-mcp-server-q]
        """,
    )
    code, out, _ = check(capsys, str(path))
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{path}: 3 problems"
    assert lines[1] == f"  {path}: limits.max_turns: must be a whole number ≥ 0, got -1"
    assert lines[2].startswith(
        f"  {path}: mcp_servers.t.side_effects.nope: the server has no such tool (it has: add, "
    )
    assert lines[3].startswith(
        f"  {path}: mcp_servers.gone: MCP server 'gone' (oarlock-no-such-mcp-server-q) did not "
        "start: "
    )


def test_a_server_that_never_answers_is_bounded_by_the_timeout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        """\
        name: mcp
        model: scripted:s.yaml
        mcp_servers:
          mute: {command: [python, -c, "import time; time.sleep(120)"]}
        """,
    )
    started = time.monotonic()
    code, out, _ = check(capsys, "--timeout", "1", str(path))
    assert time.monotonic() - started < 30
    assert code == 1
    assert f"  {path}: mcp_servers.mute: " in out
    assert "within 1 s" in out


def test_no_connect_starts_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    marker = tmp_path / "started"
    path = write(
        tmp_path,
        f"""\
        name: mcp
        model: scripted:s.yaml
        mcp_servers:
          m: {{command: [python, -c, "open({str(marker)!r}, 'w').close()"]}}
        """,
    )
    code, _, _ = check(capsys, "--no-connect", str(path))
    assert code == 0
    assert not marker.exists()
