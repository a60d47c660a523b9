"""Agent files: an agent in YAML, for the command line.

```yaml
name: refund-desk
instructions: You resolve refund requests.
model: scripted:refund-desk.script.yaml    # scripted:PATH is relative to this file; or
# model: openai:gpt-4.1 | anthropic:claude-sonnet-4-5 | openai-compatible:qwen2.5@http://127.0.0.1:11434/v1
model_options: {timeout: 60}               # passed to the adapter (see oarlock.models)
tenant: acme
scope: {project: billing, environment: prod, principal: svc-refunds, labels: {team: cx}}
policy: refund-policy.yaml                 # a rule policy (relative to this file); or
# policy: {cedar: refund-policy.cedar}     # a Cedar policy (needs oarlock[cedar])
tools:
  - oarlock.demo.refund_desk:lookup_order  # an import path: a @tool or a plain function
  - path: oarlock.demo.refund_desk:issue_refund
    side_effect: spend                     # overrides, all optional
    needs_approval: true                   # true, false, or module:predicate
    allow_response: false
    timeout_seconds: 10
    idempotency_key: oarlock.demo.refund_desk:refund_key   # a key from the arguments
mcp_servers:                               # MCP tools, named server.tool (see oarlock.tools)
  files: {command: [python, files_server.py], side_effects: {delete: production}}
limits: {max_turns: 10, max_cost_usd: 0.50, max_input_tokens: 100000, max_output_tokens: 20000}
approvers: approvers.yaml                  # the keys whose signed approvals are accepted
pricing:
  "openai:my-finetune": {input_per_million: 3.0, output_per_million: 12.0}
```
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oarlock.engine._agent import Agent, Limits
from oarlock.errors import ConfigError
from oarlock.governance._approvers import TrustedApprovers
from oarlock.governance._policy import PolicyEngine, RulePolicy
from oarlock.models._pricing import PricingTable
from oarlock.models._registry import load_model
from oarlock.tools._tool import Tool, tool

if TYPE_CHECKING:
    from oarlock.tools._mcp import MCPServerConfig

__all__ = ["load_agent", "load_model", "load_policy", "resolve_import"]

_TOP = {
    "name",
    "instructions",
    "model",
    "model_options",
    "mcp_servers",
    "tenant",
    "scope",
    "policy",
    "tools",
    "limits",
    "pricing",
    "description",
    "approvers",
}
_TOOL = {
    "path",
    "name",
    "side_effect",
    "needs_approval",
    "allow_response",
    "timeout_seconds",
    "idempotency_key",
}
_SCOPE = {"project", "environment", "principal", "labels"}
_LIMITS = {"max_turns", "max_cost_usd", "max_input_tokens", "max_output_tokens"}


def resolve_import(path: str, where: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{where}: {path!r} is not an import path like 'package.module:name'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: cannot import {path!r}: {exc}") from None
    return obj


def _mapping(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )
    return value


def _tool(entry: Any, index: int) -> Tool:
    where = f"tools[{index}]"
    spec = {"path": entry} if isinstance(entry, str) else _mapping(entry, where, _TOOL)
    if "path" not in spec:
        raise ConfigError(f"{where}: needs 'path' (an import path)")
    obj = resolve_import(str(spec["path"]), where)
    t = obj if isinstance(obj, Tool) else tool(obj) if callable(obj) else None
    if t is None:
        raise ConfigError(f"{where}: {spec['path']!r} is neither a tool nor a function")
    changes: dict[str, Any] = {
        k: spec[k]
        for k in ("name", "side_effect", "allow_response", "timeout_seconds")
        if k in spec
    }
    if "idempotency_key" in spec:
        changes["idempotency_key"] = resolve_import(
            str(spec["idempotency_key"]), f"{where}.idempotency_key"
        )
    rule = spec.get("needs_approval")
    if isinstance(rule, str):
        changes["needs_approval"] = resolve_import(rule, f"{where}.needs_approval")
    elif rule is not None:
        if not isinstance(rule, bool):
            raise ConfigError(f"{where}.needs_approval must be true, false or an import path")
        changes["needs_approval"] = rule
    return dataclasses.replace(t, **changes) if changes else t


def _options(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("model_options must be a mapping")
    return value


def _mcp_servers(value: Any, base: Path) -> list[MCPServerConfig]:
    if value is None:
        return []
    if not isinstance(value, dict):
        raise ConfigError("mcp_servers must map server names to their settings")
    from oarlock.tools._mcp import MCPServerConfig

    return [MCPServerConfig.from_dict(str(n), c, base_dir=base) for n, c in value.items()]


def load_policy(spec: Any, base: Path) -> PolicyEngine | None:
    """The agent file's ``policy``: a rule policy file, or ``{cedar: FILE}``."""
    if spec is None:
        return None
    if isinstance(spec, dict) and set(spec) == {"cedar"}:
        from oarlock.governance._cedar import CedarPolicy

        return CedarPolicy.from_file(_relative(str(spec["cedar"]), base))
    if not isinstance(spec, str):
        raise ConfigError("'policy' must be a policy file's path or {cedar: PATH}")
    return RulePolicy.from_file(_relative(spec, base))


def _approvers(spec: Any, base: Path) -> TrustedApprovers | None:
    """The agent file's ``approvers``: an approvers file (relative to the agent file)."""
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise ConfigError("'approvers' must be the path of an approvers file")
    return TrustedApprovers.from_file(_relative(spec, base))


def _relative(path: str, base: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else base / p


def _scope(value: Any) -> dict[str, Any]:
    scope = _mapping(value or {}, "scope", _SCOPE)
    labels = scope.get("labels")
    if labels is not None and not (
        isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())
    ):
        raise ConfigError("scope.labels must map names to strings")
    for key in ("project", "environment", "principal"):
        if key in scope and not isinstance(scope[key], str):
            raise ConfigError(f"scope.{key} must be a string")
    return scope


def load_agent(path: str | Path) -> Agent:
    """Build the agent an agent file describes. Errors name the file and the key."""
    import yaml

    file = Path(path).resolve()
    try:
        raw = yaml.safe_load(file.read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read agent file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"agent file {path} is not valid YAML: {exc}") from None
    try:
        spec = _mapping(raw, "the agent file", _TOP)
        for key in ("name", "model"):
            if not isinstance(spec.get(key), str) or not spec[key]:
                raise ConfigError(f"'{key}' is required and must be a string")
        if str(file.parent) not in sys.path:
            sys.path.insert(0, str(file.parent))
        limits = _mapping(spec.get("limits") or {}, "limits", _LIMITS)
        tools = spec.get("tools") or []
        if not isinstance(tools, list):
            raise ConfigError("'tools' must be a list")
        return Agent(
            spec["name"],
            load_model(spec["model"], file.parent, _options(spec.get("model_options"))),
            instructions=str(spec.get("instructions") or ""),
            tools=[_tool(t, i) for i, t in enumerate(tools)],
            limits=Limits(**limits),
            tenant=str(spec.get("tenant") or "default"),
            **_scope(spec.get("scope")),
            policy=load_policy(spec.get("policy"), file.parent),
            mcp_servers=_mcp_servers(spec.get("mcp_servers"), file.parent),
            prices=PricingTable.parse(spec.get("pricing") or {}),
            approvers=_approvers(spec.get("approvers"), file.parent),
        )
    except ConfigError as exc:
        raise ConfigError(f"{file.name}: {exc}", code=exc.code) from None
    except TypeError as exc:
        raise ConfigError(f"{file.name}: {exc}") from None
