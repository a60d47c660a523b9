"""The public surface: ``oarlock.__all__`` and ``oarlock.formats.__all__`` are pinned, every
name resolves, and ``import oarlock`` stays light (no pydantic, no jsonschema)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import oarlock
import oarlock.formats

OARLOCK_ALL = [
    "Agent",
    "CanonicalizationError",
    "DocumentInvalid",
    "ExecutionScope",
    "FormatError",
    "Limits",
    "OarlockError",
    "PolicyDecision",
    "Problem",
    "Report",
    "RunContext",
    "RunDocument",
    "RunResult",
    "Runner",
    "ToolInvocation",
    "ToolReceipt",
    "UpgradeError",
    "__version__",
    "canonicalize",
    "digest",
    "downgrade",
    "dump_run",
    "ensure_valid",
    "model_for",
    "parse_run",
    "tool",
    "upgrade",
    "validate",
]

FORMATS_ALL = [
    "APPROVAL_REQUIRED_CLASSES",
    "AssistantMessage",
    "ExecutionScope",
    "Kind",
    "Message",
    "PendingApproval",
    "PolicyDecision",
    "Problem",
    "Report",
    "RunDocument",
    "RunStatus",
    "SIDE_EFFECT_CLASSES",
    "SideEffectClass",
    "TextPart",
    "ToolCallPart",
    "ToolInvocation",
    "ToolReceipt",
    "ToolResultPart",
    "Usage",
    "UserMessage",
    "canonicalize",
    "detect_kind",
    "digest",
    "digest_bytes",
    "downgrade",
    "dump",
    "dump_json",
    "dump_run",
    "ensure_valid",
    "loads_strict",
    "now_rfc3339",
    "parse",
    "parse_json",
    "parse_rfc3339",
    "parse_run",
    "upgrade",
    "validate",
]


def test_oarlock_all_is_pinned():
    assert list(oarlock.__all__) == OARLOCK_ALL


def test_formats_all_is_pinned():
    assert list(oarlock.formats.__all__) == FORMATS_ALL


@pytest.mark.parametrize("name", OARLOCK_ALL)
def test_every_oarlock_name_resolves(name):
    value = getattr(oarlock, name)
    assert value is not None
    assert name in dir(oarlock)


@pytest.mark.parametrize("name", FORMATS_ALL)
def test_every_formats_name_resolves(name):
    assert getattr(oarlock.formats, name) is not None


@pytest.mark.parametrize("name", sorted(set(OARLOCK_ALL) - {"__version__"}))
def test_top_level_names_are_the_real_objects(name):
    import oarlock.engine
    import oarlock.errors
    import oarlock.models
    import oarlock.tools

    sources = (oarlock.formats, oarlock.errors, oarlock.engine, oarlock.tools, oarlock.models)
    source = next(s for s in sources if hasattr(s, name))
    assert getattr(oarlock, name) is getattr(source, name)


def test_star_import_gives_exactly_all():
    namespace: dict[str, object] = {}
    exec("from oarlock import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(OARLOCK_ALL)


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = oarlock.no_such_thing  # type: ignore[attr-defined]


def test_version_is_a_string():
    assert isinstance(oarlock.__version__, str)
    assert oarlock.__version__.count(".") >= 2


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


HEAVY = ("pydantic", "pydantic_core", "jsonschema", "referencing", "rfc8785")


def test_import_oarlock_is_light():
    loaded = _modules_after("import oarlock")
    assert "oarlock" in loaded
    heavy = {m for m in loaded if m.split(".")[0] in HEAVY}
    assert heavy == set(), heavy


def test_import_of_the_cli_is_light():
    loaded = _modules_after("import oarlock.cli; oarlock.cli.build_parser()")
    heavy = {m for m in loaded if m.split(".")[0] in ("pydantic", "jsonschema")}
    assert heavy == set(), heavy


def test_first_use_of_a_lazy_name_loads_the_formats():
    loaded = _modules_after("import oarlock; oarlock.validate")
    assert "oarlock.formats" in loaded
    assert "oarlock.formats" not in _modules_after("import oarlock")


GOVERNANCE_ALL = [
    "DEFAULT_POLICY",
    "Approval",
    "CallContext",
    "Checkpoint",
    "Claim",
    "GovernanceStore",
    "GovernedExecutor",
    "LedgerEntry",
    "MemoryGovernanceStore",
    "PolicyEngine",
    "PolicyRequest",
    "PolicyVerdict",
    "Reconciliation",
    "Recorded",
    "Review",
    "RulePolicy",
    "StoredReceipt",
    "VerifyReport",
    "fence",
    "generate_key",
    "load_private_key",
    "load_public_key",
    "sanitize",
    "sanitize_result",
    "sign_checkpoint",
    "unfence",
    "verify_chain",
]

TOOLS_ALL = [
    "CAUTIOUS_CLASS",
    "ProcessResult",
    "RunContext",
    "run_process",
    "ApprovalRule",
    "KeyRule",
    "Tool",
    "ToolArgumentsError",
    "ToolEffect",
    "ToolOutput",
    "Toolset",
    "result_text",
    "tool",
]


def test_governance_and_tools_all_are_pinned():
    import oarlock.governance
    import oarlock.tools

    assert list(oarlock.governance.__all__) == GOVERNANCE_ALL
    assert list(oarlock.tools.__all__) == TOOLS_ALL
    for module, names in ((oarlock.governance, GOVERNANCE_ALL), (oarlock.tools, TOOLS_ALL)):
        for name in names:
            assert getattr(module, name) is not None, name


ENGINE_ALL = [
    "TERMINAL",
    "Agent",
    "ApprovalRequested",
    "CallContext",
    "CallWatch",
    "ChatWatch",
    "DriveWatch",
    "Executor",
    "Finished",
    "Limits",
    "ModelResponded",
    "RetryPolicy",
    "RunObserver",
    "RunResult",
    "Runner",
    "StatusChanged",
    "StreamEvent",
    "TextDelta",
    "ToolFinished",
    "ToolStarted",
    "UserMessageAdded",
]

MODELS_ALL = [
    "DEFAULT_PRICES",
    "AnthropicModel",
    "Divergence",
    "FunctionModel",
    "ModelAdapter",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "Price",
    "PricingTable",
    "ReplayModel",
    "ScriptedModel",
    "model_for",
]


def test_engine_and_models_all_are_pinned():
    import oarlock.engine
    import oarlock.models

    assert list(oarlock.engine.__all__) == ENGINE_ALL
    assert list(oarlock.models.__all__) == MODELS_ALL
    for name in ENGINE_ALL:
        assert getattr(oarlock.engine, name) is not None, name
    # the provider adapters are named without loading their SDKs
    loaded = _modules_after("import oarlock.models; oarlock.models.model_for")
    assert not {m for m in loaded if m.split(".")[0] in ("openai", "anthropic")}


TELEMETRY_ALL = [
    "TRACE_MEMBER",
    "Configured",
    "JsonLogFormatter",
    "SpanNode",
    "Telemetry",
    "configure",
    "configure_from_env",
    "default_observer",
    "log_json",
    "render_tree",
    "span_tree",
]


def test_telemetry_all_is_pinned_and_needs_only_the_api():
    import oarlock.telemetry

    assert list(oarlock.telemetry.__all__) == TELEMETRY_ALL
    for name in TELEMETRY_ALL:
        assert getattr(oarlock.telemetry, name) is not None, name
    # a runner's default observer loads OpenTelemetry's API, never its SDK
    loaded = _modules_after("import oarlock.telemetry as t; t.default_observer(); t.Telemetry")
    assert "opentelemetry.trace" in loaded
    assert not {m for m in loaded if m.startswith("opentelemetry.sdk")}
    # the span tree of runs show --trace loads neither OpenTelemetry nor pydantic
    loaded = _modules_after("from oarlock.telemetry import span_tree")
    assert not {m for m in loaded if m.split(".")[0] in ("opentelemetry", "pydantic")}


def test_building_an_agent_from_the_top_level_leaves_import_light():
    assert "oarlock.engine" not in _modules_after("import oarlock")
    loaded = _modules_after("import oarlock\nassert oarlock.Agent.__name__ == 'Agent'")
    assert "oarlock.engine" in loaded


def test_the_cedar_engine_loads_on_first_use():
    import oarlock.governance

    assert oarlock.governance.CedarPolicy.__name__ == "CedarPolicy"
    with pytest.raises(AttributeError):
        _ = oarlock.governance.NoSuchEngine


SERVER_ALL = ["ServerSettings", "create_app"]


def test_server_all_is_pinned_and_the_cli_does_not_load_it():
    import oarlock.server

    assert list(oarlock.server.__all__) == SERVER_ALL
    for name in SERVER_ALL:
        assert getattr(oarlock.server, name) is not None, name
    loaded = _modules_after("import oarlock.cli; oarlock.cli.build_parser()")
    assert not {m for m in loaded if m.split(".")[0] in ("fastapi", "starlette", "uvicorn")}
    assert "oarlock.server" not in loaded
TEMPORAL_ALL = [
    "Activities",
    "Progress",
    "RunOptions",
    "RunWorkflow",
    "Snapshot",
    "TemporalTarget",
    "cancel_run",
    "connect",
    "decide_run",
    "driven_by",
    "has_worker",
    "make_worker",
    "restart_run",
    "settled",
    "start_run",
    "workflow_runner",
]


def test_temporal_all_is_pinned_and_temporal_loads_only_with_it():
    import oarlock.temporal

    assert list(oarlock.temporal.__all__) == TEMPORAL_ALL
    for name in TEMPORAL_ALL:
        assert getattr(oarlock.temporal, name) is not None, name
    for code in ("import oarlock", "import oarlock.engine", "import oarlock.cli; "
                 "oarlock.cli.build_parser()", "import oarlock._driven",
                 "import oarlock.cli._runs"):  # fmt: skip
        assert "temporalio" not in _modules_after(code), code
