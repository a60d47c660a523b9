"""Agent files are checked key by key: every wrong type, NaN, infinity or empty name is a
problem naming the file, the key and the rule, and every problem of a file is reported at
once. Tool modules cannot shadow standard or installed modules, and a module that fails
to import is a problem of its tool entry, never a traceback."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oarlock.engine import Agent, Limits
from oarlock.engine._agentfile import check_agent_file, load_agent
from oarlock.errors import ConfigError
from oarlock.models import ScriptedModel
from oarlock.models._pricing import Price
from oarlock.tools import tool

TOOLS = "oarlock.demo.refund_desk"
NUM = "must be a finite number ≥ 0, got"
WHOLE = "must be a whole number ≥ 0, got"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "s.yaml").write_text("- text: hi\n")
    return tmp_path


def agent_file(folder: Path, body: str, name: str = "agent.yaml") -> Path:
    path = folder / name
    path.write_text("name: a\nmodel: scripted:s.yaml\n" + textwrap.dedent(body))
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_agent(path)
    return list(info.value.problems)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("limits: {max_cost_usd: .nan}", f"limits.max_cost_usd: {NUM} nan"),
        ("limits: {max_cost_usd: .inf}", f"limits.max_cost_usd: {NUM} inf"),
        ("limits: {max_cost_usd: -1}", f"limits.max_cost_usd: {NUM} -1"),
        ("limits: {max_cost_usd: '0.5'}", f"limits.max_cost_usd: {NUM} '0.5'"),
        ("limits: {max_turns: .nan}", f"limits.max_turns: {WHOLE} nan"),
        ("limits: {max_turns: abc}", f"limits.max_turns: {WHOLE} 'abc'"),
        ("limits: {max_turns: 2.5}", f"limits.max_turns: {WHOLE} 2.5"),
        ("limits: {max_turns: yes}", f"limits.max_turns: {WHOLE} true"),
        ("limits: {max_input_tokens: [1]}", f"limits.max_input_tokens: {WHOLE} a list"),
        ("limits: {max_tokens: 5}", "limits.max_tokens: unknown key (allowed: max_cost_usd, "),
        ("limits: 10", "limits: must be a mapping, got 10"),
        ("instructions: {a: 1}", "instructions: must be a string, got a mapping"),
        ("description: 5", "description: must be a string, got 5"),
        ("tenant: [1, 2]", "tenant: must be a non-empty string, got a list"),
        ("tenant: ''", "tenant: must be a non-empty string, got ''"),
        ("scope: {project: 5}", "scope.project: must be a non-empty string, got 5"),
        ("scope: {labels: {team: [x]}}", "scope.labels.team: must be a string, got a list"),
        ("scope: {labels: {1: x}}", "scope.labels: keys must be strings, got 1"),
        ("scope: []", "scope: must be a mapping, got a list"),
        ("pricing: {'scripted:x': {input_per_million: .nan, output_per_million: 1}}",
         "pricing.scripted:x.input_per_million: must be a finite number ≥ 0, got nan"),
        ("pricing: {'scripted:x': {input_per_million: 1}}",
         "pricing.scripted:x.output_per_million: required (USD per million tokens)"),
        ("pricing: {'scripted:x': 3}", "pricing.scripted:x: must be a mapping, got 3"),
        ("model_options: {timeout: .nan}", "model_options.timeout: must be a finite number > 0"),
        ("model_options: []", "model_options: must be a mapping, got a list"),
        ("policy: 5", "policy: must be a policy file's path or {cedar: PATH}, got 5"),
        ("policy: {cedar: [x]}", "policy: cedar: must be a non-empty string, got a list"),
        ("tools: {a: 1}", "tools: must be a list, got a mapping"),
        ("tools: [5]", "tools[0]: must be a mapping, got 5"),
        ("tools: [{name: x}]", "tools[0].path: required (an import path like package.module:name)"),
        (f"tools: [{{path: '{TOOLS}:lookup_order', allow_response: maybe}}]",
         "tools[0].allow_response: must be true or false, got 'maybe'"),
        (f"tools: [{{path: '{TOOLS}:lookup_order', timeout_seconds: abc}}]",
         "tools[0].timeout_seconds: must be a finite number > 0, got 'abc'"),
        (f"tools: [{{path: '{TOOLS}:lookup_order', timeout_seconds: .inf}}]",
         "tools[0].timeout_seconds: must be a finite number > 0, got inf"),
        (f"tools: [{{path: '{TOOLS}:lookup_order', side_effect: write}}]",
         "tools[0].side_effect: must be one of read, sandbox, shared-write, "),
        (f"tools: [{{path: '{TOOLS}:lookup_order', name: ''}}]",
         "tools[0].name: must be a non-empty string, got ''"),
        (f"tools: [{{path: '{TOOLS}:lookup_order', name: 'two words'}}]",
         "tools[0]: tool name 'two words': use 1-64 letters, digits, _ . -"),
        (f"tools: [{{path: '{TOOLS}:lookup_order', needs_approval: 3}}]",
         "tools[0].needs_approval: must be true, false or an import path, got 3"),
        (f"tools: ['{TOOLS}:lookup_order', '{TOOLS}:lookup_order']",
         "tools[1]: two tools are named 'lookup_order'"),
        ("tools: ['no such path']", "tools[0].path: 'no such path' is not an import path like"),
        ("tools: ['oarlock:__version__']", "tools[0]: 'oarlock:__version__' is neither a tool nor"),
        ("tools: ['no_such_module_q:f']",
         "tools[0].path: cannot import 'no_such_module_q': no module named 'no_such_module_q'"),
        (f"tools: ['{TOOLS}:nothing']", f"tools[0].path: module '{TOOLS}' has no 'nothing'"),
        ("mcp_servers: {s: {command: python}}",
         "mcp_servers.s.command: expected a list of strings like [npx, server]"),
        ("mcp_servers: []", "mcp_servers: must be a mapping, got a list"),
        ("colour: red", "colour: unknown key (allowed: "),
    ],
)
def test_a_bad_value_is_a_problem_naming_file_key_and_rule(
    folder: Path, body: str, problem: str
) -> None:
    path = agent_file(folder, body + "\n")
    found = problems_of(path)
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}: {problem}")


def test_name_and_model_are_required_non_empty_strings(folder: Path) -> None:
    path = folder / "agent.yaml"
    path.write_text("name: [1]\nmodel: ''\n")
    assert problems_of(path) == [
        f"{path}: name: must be a non-empty string, got a list",
        f"{path}: model: must be a non-empty string, got ''",
    ]
    path.write_text("- name: a\n")
    assert problems_of(path) == [f"{path}: the agent file: must be a mapping, got a list"]


def test_every_problem_of_a_file_is_reported_at_once(folder: Path) -> None:
    path = folder / "agent.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: [1]
            instructions: {{a: 1}}
            model: scripted:s.yaml
            tenant: [1, 2]
            limits: {{max_cost_usd: .nan, max_turns: abc}}
            tools:
              - path: {TOOLS}:lookup_order
                allow_response: maybe
                timeout_seconds: abc
              - no_such_module_q:f
            policy: missing.yaml
            mcp_servers:
              s: {{command: [python], timeout_seconds: .inf, max_restarts: -1}}
            """
        )
    )
    with pytest.raises(ConfigError) as info:
        load_agent(path)
    lines = [p.removeprefix(f"{path}: ") for p in info.value.problems]
    assert lines == [
        "name: must be a non-empty string, got a list",
        "instructions: must be a string, got a mapping",
        "tenant: must be a non-empty string, got a list",
        "limits.max_turns: must be a whole number ≥ 0, got 'abc'",
        "limits.max_cost_usd: must be a finite number ≥ 0, got nan",
        f"policy: {folder / 'missing.yaml'}: no such policy file",
        "tools[0].allow_response: must be true or false, got 'maybe'",
        "tools[0].timeout_seconds: must be a finite number > 0, got 'abc'",
        "tools[1].path: cannot import 'no_such_module_q': no module named 'no_such_module_q'",
        "mcp_servers.s.timeout_seconds: expected a positive number, got inf",
        "mcp_servers.s.max_restarts: expected a whole number of at least 0",
    ]
    message = str(info.value)
    assert message.startswith(f"{path}: 11 problems\n  {path}: name: must be")


def test_problems_of_the_files_an_agent_file_names(folder: Path) -> None:
    (folder / "policy.yaml").write_text("policy: p\nrules:\n  - {id: r, effect: permit}\n")
    (folder / "bad.script.yaml").write_text("- usage: {input_tokens: -1}\n")
    path = agent_file(folder, "policy: policy.yaml\n").with_name("agent.yaml")
    path.write_text("name: a\nmodel: scripted:bad.script.yaml\npolicy: policy.yaml\n")
    found = problems_of(path)
    assert found == [
        f"{path}: model: {folder / 'bad.script.yaml'}: turns[0].usage.input_tokens: must be a "
        "whole number ≥ 0, got -1",
        f"{path}: policy: {folder / 'policy.yaml'}: rule 'r' (rules[0]): effect: expected one "
        "of allow, deny, require_approval, got 'permit'",
    ]


def test_a_cost_limit_without_a_price_names_the_limit(folder: Path) -> None:
    path = folder / "agent.yaml"
    path.write_text("name: a\nmodel: openai:my-own-model\nlimits: {max_cost_usd: 1}\n")
    with pytest.raises(ConfigError) as info:
        load_agent(path)
    assert info.value.code == "unpriced_model"
    assert str(info.value).startswith(
        f"{path}: limits.max_cost_usd: no price for model 'openai:my-own-model'"
    )


def test_paths_in_messages_are_those_the_user_typed(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder)
    agent_file(folder, "policy: missing.yaml\n")
    found = problems_of(Path("agent.yaml"))
    assert found == ["agent.yaml: policy: missing.yaml: no such policy file"]


def test_null_optional_keys_are_absent(folder: Path) -> None:
    path = agent_file(folder, "tools:\nlimits:\ninstructions:\nscope:\npricing:\nmcp_servers:\n")
    agent = load_agent(path)
    assert (len(agent.tools), agent.instructions, agent.tenant) == (0, "", "default")


def test_a_valid_file_loads(folder: Path) -> None:
    path = agent_file(
        folder,
        f"""\
        instructions: Help.
        tenant: acme
        scope: {{project: p, labels: {{team: cx}}}}
        limits: {{max_turns: 3, max_cost_usd: 0, max_input_tokens: 10}}
        pricing: {{"scripted:*": {{input_per_million: 1, output_per_million: 2.5}}}}
        tools:
          - {TOOLS}:lookup_order
          - {{path: {TOOLS}:issue_refund, timeout_seconds: 5, allow_response: true}}
        """,
    )
    agent = load_agent(path)
    assert agent.limits == Limits(max_turns=3, max_cost_usd=0, max_input_tokens=10)
    refund = agent.tools.get("issue_refund")
    assert refund is not None and (refund.timeout_seconds, refund.allow_response) == (5, True)
    assert agent.scope == {"tenantId": "acme", "projectId": "p", "labels": {"team": "cx"}}


# -- the Python API -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"max_cost_usd": math.nan}, "limits.max_cost_usd: must be a finite number ≥ 0, got nan"),
        ({"max_cost_usd": math.inf}, "limits.max_cost_usd: must be a finite number ≥ 0, got inf"),
        ({"max_cost_usd": True}, "limits.max_cost_usd: must be a finite number ≥ 0, got true"),
        ({"max_cost_usd": "1"}, "limits.max_cost_usd: must be a finite number ≥ 0, got '1'"),
        ({"max_turns": math.nan}, "limits.max_turns: must be a whole number ≥ 0, got nan"),
        ({"max_turns": 2.0}, "limits.max_turns: must be a whole number ≥ 0, got 2.0"),
        ({"max_output_tokens": "10"}, "limits.max_output_tokens: must be a whole number ≥ 0"),
    ],
)
def test_limits_refuse_what_would_turn_a_limit_off(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as info:
        Limits(**kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(says)


def test_limits_accept_numbers() -> None:
    assert Limits(max_turns=0, max_cost_usd=0, max_input_tokens=10**12).max_cost_usd == 0
    assert Limits(max_cost_usd=0.25).max_cost_usd == 0.25


def test_prices_and_tools_refuse_bad_numbers() -> None:
    with pytest.raises(ConfigError, match="input_per_million: must be a finite number ≥ 0"):
        Price(math.nan, 1.0)
    with pytest.raises(ConfigError, match="timeout_seconds: must be a finite number > 0"):

        @tool(side_effect="read", timeout_seconds="abc")  # type: ignore[arg-type]
        def slow(x: int) -> int:
            return x

    def echo(x: int) -> int:
        return x

    with pytest.raises(ConfigError, match="allow_response: must be true or false"):
        tool(side_effect="read", allow_response="maybe")(echo)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a name"):
        Agent([1], ScriptedModel([]))  # type: ignore[arg-type]


# -- tool modules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def f(:\n", "tools[0].path: cannot import 'mod_a': syntax error in mod_a.py, line 1"),
        ("raise RuntimeError('no database')\n",
         "tools[0].path: importing 'mod_a' failed: RuntimeError: no database"),
        ("import sys\nsys.exit(3)\n", "tools[0].path: importing 'mod_a' failed: SystemExit: 3"),
        ("import no_such_dependency_q\n",
         "tools[0].path: importing 'mod_a' failed: it imports 'no_such_dependency_q', which is "
         "not found"),
        ("import helper_b\n",
         "tools[0].path: importing 'mod_a' failed: it imports 'helper_b', which is not found (a "
         "module next to the agent file imports its neighbours relatively: from . import "
         "helper_b)"),
        ("x = 1 / 0\n", "tools[0].path: importing 'mod_a' failed: ZeroDivisionError"),
    ],
)
def test_a_tool_module_that_fails_to_import_is_a_problem_of_its_entry(
    folder: Path, source: str, says: str
) -> None:
    (folder / "mod_a.py").write_text(source)
    (folder / "helper_b.py").write_text("VALUE = 1\n")
    path = agent_file(folder, "tools: ['mod_a:f']\n")
    found = problems_of(path)
    assert len(found) == 1
    assert found[0].startswith(f"{path}: {says}")


def test_the_cli_reports_an_import_failure_without_a_traceback(folder: Path) -> None:
    (folder / "mod_a.py").write_text("raise ValueError('bad config at import')\n")
    path = agent_file(
        folder, f"tools:\n  - mod_a:f\n  - path: {TOOLS}:lookup_order\n    timeout_seconds: abc\n"
    )
    db = folder / "runs.db"
    done = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(db), "run", str(path), "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    says = "tools[0].path: importing 'mod_a' failed: ValueError: bad config at import"
    assert says in done.stderr
    assert "tools[1].timeout_seconds: must be a finite number > 0, got 'abc'" in done.stderr
    if db.exists():  # no run was started, so none is left running
        with sqlite3.connect(db) as conn:
            tables = {r[0] for r in conn.execute("select name from sqlite_master")}
            if "runs" in tables:
                assert conn.execute("select count(*) from runs").fetchone() == (0,)


def test_a_json_py_next_to_an_agent_file_does_not_replace_json(folder: Path) -> None:
    marker = folder / "shadow-ran"
    (folder / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\ndumps = None\n")
    (folder / "desk_tools.py").write_text(
        textwrap.dedent(
            """\
            import json

            from oarlock.tools import tool


            @tool(side_effect="read")
            def encode(value: str) -> str:
                \"\"\"JSON of a value.\"\"\"
                return json.dumps({"v": value})
            """
        )
    )
    path = agent_file(folder, "tools: ['desk_tools:encode']\n")
    agent = load_agent(path)
    encode = agent.tools.get("encode")
    assert encode is not None and encode.fn("x") == '{"v": "x"}'
    assert not marker.exists()
    import json

    assert json.dumps is not None and "json.py" not in str(sys.modules["json"].__file__ or "")
    assert not any(str(folder) == p for p in sys.path)


@pytest.mark.parametrize("module", ["json", "yaml", "sys", "oarlock"])
def test_naming_a_local_module_that_shadows_an_installed_one_is_an_error(
    folder: Path, module: str
) -> None:
    marker = folder / "shadow-ran"
    (folder / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef f(): pass\n")
    path = agent_file(folder, f"tools: ['{module}:f']\n")
    (found,) = problems_of(path)
    assert found.startswith(
        f"{path}: tools[0].path: the module {module!r} next to the agent file ({module}.py) has "
        "the name of a standard or installed module ("
    )
    assert found.endswith("which an agent file cannot replace: rename it")
    assert not marker.exists()


def test_local_modules_of_two_folders_do_not_mix(tmp_path: Path) -> None:
    agents = []
    for word in ("first", "second"):
        folder = tmp_path / word
        folder.mkdir()
        (folder / "s.yaml").write_text("- text: hi\n")
        (folder / "helpers.py").write_text(f"WORD = {word!r}\n")
        (folder / "desk_tools.py").write_text(
            textwrap.dedent(
                """\
                from oarlock.tools import tool

                from . import helpers


                @tool(side_effect="read")
                def which() -> str:
                    \"\"\"Which folder.\"\"\"
                    return helpers.WORD
                """
            )
        )
        agents.append(load_agent(agent_file(folder, "tools: ['desk_tools:which']\n")))
    words = [a.tools.get("which").fn() for a in agents]  # type: ignore[union-attr]
    assert words == ["first", "second"]


def test_a_local_package_is_a_module_of_the_folder(folder: Path) -> None:
    package = folder / "desk"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tools.py").write_text(
        "from oarlock.tools import tool\n\n\n@tool(side_effect='read')\n"
        "def ping() -> str:\n    '''Ping.'''\n    return 'pong'\n"
    )
    agent = load_agent(agent_file(folder, "tools: ['desk.tools:ping']\n"))
    assert agent.tools.get("ping") is not None


def test_check_agent_file_keeps_what_loaded(folder: Path) -> None:
    path = agent_file(folder, f"tools: ['{TOOLS}:lookup_order', 'nope_q:f']\nlimits: 5\n")
    checked = check_agent_file(path)
    assert checked.agent is None and not checked.ok
    assert [t.name for t in checked.tools] == ["lookup_order"]
    assert len(checked.problems) == 2
