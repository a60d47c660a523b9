"""Models on the command line, end to end in real processes: ``--model`` keeps the agent
file's cost limit, a ``scripted:PATH`` model is found again by any later process wherever
it runs, and a key that a provider echoes in its error is never stored or printed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.acceptance.test_cli_runs import CALL, FINAL, TIMEOUT, Cli
from tests.integration import anthropic_wire as aw
from tests.integration import openai_wire as ow

from oarlock.demo import AGENT_FILE
from oarlock.engine import Agent, Limits
from oarlock.errors import ConfigError
from oarlock.models import ScriptedModel
from oarlock.models._openai import OpenAIModel

ASK = "Order A-1001 arrived broken. Please refund it."
# a key of no well-known shape: only knowing it as configured can redact it
KEY = "qk9Tz2LmX4vB7nR1wE5yHc3J"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture
def openai_server() -> Iterator[ow.FakeOpenAI]:
    with ow.FakeOpenAI() as server:
        yield server


def in_dir(cli: Cli, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command, run from ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(cli.db), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=cli.env,
        cwd=cwd,
        check=False,
    )


# -- --model and prices --------------------------------------------------------------------
def test_an_unpriced_model_is_refused_where_the_agent_file_sets_a_cost_limit(
    cli: Cli, openai_server: ow.FakeOpenAI
) -> None:
    model = f"openai-compatible:qwen2.5@{openai_server.base_url}"
    out = cli("run", str(AGENT_FILE), ASK, "--model", model)  # the demo: max_cost_usd 0.25
    assert out.returncode == 1, out.stdout
    assert out.stderr.startswith(f"oarlock: --model {model}: no price for model")
    assert "Traceback" not in out.stderr
    assert not cli.db.exists() and openai_server.requests == []  # no run, not even a store


def test_with_model_keeps_the_cost_limit() -> None:
    agent = Agent("capped", ScriptedModel([]), limits=Limits(max_cost_usd=1.0))
    unpriced = OpenAIModel(
        "qwen2.5", base_url="http://127.0.0.1:9/v1", provider="openai-compatible"
    )
    with pytest.raises(ConfigError) as info:
        agent.with_model(unpriced)
    assert info.value.code == "unpriced_model" and unpriced.model_id in str(info.value)
    assert agent.with_model(OpenAIModel("gpt-4.1", api_key=KEY)).price is not None


# -- --model scripted:PATH -----------------------------------------------------------------
@pytest.mark.parametrize("given", ["relative", "absolute"])
def test_a_scripted_model_is_found_again_from_any_directory(
    cli: Cli, tmp_path: Path, given: str
) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "scripts").mkdir(parents=True)
    elsewhere.mkdir()
    script = work / "scripts" / "desk.yaml"
    script.write_text((AGENT_FILE.parent / "refund-desk.script.yaml").read_text())
    spec = "scripted:scripts/desk.yaml" if given == "relative" else f"scripted:{script}"

    out = in_dir(cli, work, "run", str(AGENT_FILE), ASK, "--model", spec)
    assert out.returncode == 0, out.stderr
    (run,) = cli.runs()
    doc = cli.export(run["id"])
    assert doc["status"] == "waiting_approval"
    assert doc["model"] == f"scripted:{script.resolve()}"

    out = in_dir(cli, elsewhere, "approve", run["id"], CALL)  # a new process, elsewhere
    assert out.returncode == 0, out.stderr
    doc = cli.export(run["id"])
    assert doc["status"] == "completed" and doc["result"].startswith(FINAL)


# -- secrets --------------------------------------------------------------------------------
def echo_401(request: ow.Recorded) -> ow.Reply:
    """A proxy's 401 that echoes what it was sent."""
    sent = request.headers.get("authorization", "")
    message = f"Invalid credentials: Authorization: {sent}. The key {KEY} is not known here."
    return ow.error_reply(401, message, "invalid_request_error", "invalid_api_key")


def agent_file(tmp_path: Path, model: str, options: str = "") -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(f"name: talker\nmodel: {model}\n{options}")
    return path


def assert_nowhere(cli: Cli, run_id: str, secret: str, printed: str) -> dict[str, Any]:
    assert secret not in printed
    doc, events, _ = cli.snapshot(run_id)
    assert secret not in json.dumps(doc) and secret not in json.dumps(events)
    for command in (("runs", "show", run_id), ("runs", "export", run_id)):
        out = cli(*command)
        assert out.returncode == 0, out.stderr
        assert secret not in out.stdout + out.stderr
    return doc


@pytest.mark.parametrize("where", ["model_options", "environment"])
def test_a_key_echoed_by_an_openai_compatible_server_is_never_stored_or_printed(
    cli: Cli, tmp_path: Path, openai_server: ow.FakeOpenAI, where: str
) -> None:
    openai_server.reply(echo_401)
    model = f"openai-compatible:qwen2.5@{openai_server.base_url}"
    if where == "model_options":
        path = agent_file(tmp_path, model, f"model_options: {{api_key: {KEY}}}\n")
    else:
        path = agent_file(tmp_path, model)
        cli.env["OPENAI_COMPATIBLE_API_KEY"] = KEY
    out = cli("run", str(path), "hi")
    assert out.returncode == 3, out.stderr  # failed
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    (run,) = cli.runs()
    doc = assert_nowhere(cli, run["id"], KEY, out.stdout + out.stderr)
    assert doc["status"] == "failed"
    assert doc["error"].startswith("model error (auth_failed)") and "[redacted]" in doc["error"]


def test_a_base_url_password_is_never_stored_or_printed(
    cli: Cli, tmp_path: Path, openai_server: ow.FakeOpenAI
) -> None:
    password = "Pw7xQ2vLk9Zr4Tn8"

    def echo(request: ow.Recorded) -> ow.Reply:
        message = f"no access for {request.headers.get('authorization')} with {password}"
        return ow.error_reply(401, message, "invalid_request_error")

    openai_server.reply(echo)
    url = openai_server.base_url.replace("http://", f"http://desk:{password}@")
    out = cli("run", str(agent_file(tmp_path, f"openai-compatible:qwen2.5@{url}")), "hi")
    assert out.returncode == 3, out.stderr
    (run,) = cli.runs()
    doc = assert_nowhere(cli, run["id"], password, out.stdout + out.stderr)
    assert doc["model"] == f"openai-compatible:qwen2.5@{url.replace(':' + password, '')}"
    assert "auth_failed" in doc["error"]


def test_a_key_echoed_by_anthropic_is_never_stored_or_printed(cli: Cli, tmp_path: Path) -> None:
    with aw.FakeAnthropic() as server:
        server.error(401, "authentication_error", f"invalid x-api-key: {KEY}")
        cli.env.update(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=KEY)
        cli.env.pop("ANTHROPIC_AUTH_TOKEN", None)
        out = cli("run", str(agent_file(tmp_path, f"anthropic:{aw.MODEL}")), "hi")
        assert out.returncode == 3, out.stderr
        assert KEY in json.dumps(server.requests[0].headers)  # it was sent, and echoed
    (run,) = cli.runs()
    doc = assert_nowhere(cli, run["id"], KEY, out.stdout + out.stderr)
    assert "auth_failed" in doc["error"] and "[redacted]" in doc["error"]


def test_no_key_of_the_environment_survives_in_the_cli_of_another_process(
    cli: Cli, tmp_path: Path, openai_server: ow.FakeOpenAI
) -> None:
    """The run's process knew the key; the process that shows the run does not (no key
    in its environment), and shows nothing of it, because nothing of it was stored."""
    openai_server.reply(echo_401)
    cli.env["OPENAI_COMPATIBLE_API_KEY"] = KEY
    out = cli(
        "run", str(agent_file(tmp_path, f"openai-compatible:m@{openai_server.base_url}")), "hi"
    )
    assert out.returncode == 3
    (run,) = cli.runs()
    del cli.env["OPENAI_COMPATIBLE_API_KEY"]
    shown = cli("runs", "show", run["id"])
    assert shown.returncode == 0 and "error: model error (auth_failed)" in shown.stdout
    assert KEY not in shown.stdout


async def test_an_adapters_error_and_its_traceback_hold_no_echoed_key(
    openai_server: ow.FakeOpenAI,
) -> None:
    import traceback

    from oarlock.errors import ModelError
    from oarlock.formats._models import TextPart, UserMessage
    from oarlock.models._anthropic import AnthropicModel
    from oarlock.models._base import ModelRequest

    request = ModelRequest(
        "", [UserMessage(role="user", content=[TextPart(type="text", text="hi")])]
    )
    openai_server.reply(echo_401)
    with aw.FakeAnthropic() as server:
        server.error(401, "authentication_error", f"invalid x-api-key: {KEY}")
        for model in (
            OpenAIModel(
                "m", base_url=openai_server.base_url, api_key=KEY, provider="openai-compatible"
            ),
            AnthropicModel(aw.MODEL, base_url=server.base_url, api_key=KEY),
        ):
            try:
                with pytest.raises(ModelError) as info:
                    await model.respond(request)
            finally:
                await model.aclose()
            assert info.value.code == "auth_failed" and "[redacted]" in str(info.value)
            assert KEY not in "".join(traceback.format_exception(info.value))
