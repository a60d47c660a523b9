"""Agent files: an agent in YAML, for the command line.

```yaml
name: refund-desk
instructions: You resolve refund requests.
model: scripted:refund-desk.script.yaml    # scripted:PATH is relative to this file; or
# model: openai:gpt-4.1 | anthropic:claude-sonnet-4-5 | openai-compatible:qwen2.5@http://127.0.0.1:11434/v1
model_options: {timeout: 60}               # passed to the adapter (see oarlock.models)
tenant: acme
engine: native                             # or temporal: `oarlock run` starts it on Temporal
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
  - path: oarlock.sandbox:shell            # a sandbox-class tool (see oarlock.sandbox)
    sandbox: {egress: none, limits: {cpu_seconds: 5}, env: [LANG]}
mcp_servers:                               # MCP tools, named server.tool (see oarlock.tools)
  files: {command: [python, files_server.py], side_effects: {delete: production}}
limits: {max_turns: 10, max_cost_usd: 0.50, max_input_tokens: 100000, max_output_tokens: 20000}
approvers: approvers.yaml                  # the keys whose signed approvals are accepted
sandbox:                                   # how sandbox-class calls run (all optional)
  isolation: bubblewrap                    # the least accepted: auto, bubblewrap, unshare
  limits: {memory_bytes: 536870912, timeout_seconds: 60}
  allow_hosts: ["pypi.org:443"]            # what the allowlist egress profile opens
  workspaces: workspaces                   # the runs' workspaces folder
pricing:
  "openai:my-finetune": {input_per_million: 3.0, output_per_million: 12.0}
```

Every key is checked (types, finite numbers, whole numbers where counts are meant,
non-empty names), and every problem is collected before anything is reported: a
:class:`~oarlock.errors.ConfigError` lists them all, each as ``FILE: KEY: RULE``
(``agent.yaml: limits.max_cost_usd: must be a finite number ≥ 0, got nan``).
:func:`check_agent_file` returns them instead of raising, for ``oarlock check``.

What loading an agent file runs: the imports of the modules its ``tools`` name (and the
modules of their ``needs_approval`` predicates and ``idempotency_key`` functions), which
run those modules' top-level code. A module next to the agent file is imported under a
private package name made from the file's folder, never as a top-level module (unless it is
the very file an installed module of that name is): it cannot replace a standard or
installed module (a ``json.py`` there does not change what
``import json`` means anywhere), and naming one that has the name of a standard or
installed module is an error. Such a module imports its neighbours relatively
(``from . import helpers``). MCP server commands run when the agent connects (a run, a
resume, ``oarlock check`` without ``--no-connect``), not when the file is loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oarlock._config import (
    Problems,
    at,
    describe,
    need_bool,
    need_mapping,
    need_number,
    need_text,
    need_whole,
    unknown_keys,
)
from oarlock._input import decode_text, read_input
from oarlock._yaml import load_yaml
from oarlock.engine._agent import Agent, Limits
from oarlock.errors import ConfigError, OarlockError
from oarlock.formats._rules import SIDE_EFFECT_CLASSES
from oarlock.governance._approvers import TrustedApprovers
from oarlock.governance._policy import PolicyEngine, RulePolicy
from oarlock.models._base import ModelAdapter
from oarlock.models._pricing import PricingTable
from oarlock.models._registry import load_model
from oarlock.tools._tool import Tool, Toolset, tool

if TYPE_CHECKING:
    from oarlock.tools._mcp import MCPServerConfig

__all__ = [
    "AgentFileCheck",
    "check_agent_file",
    "load_agent",
    "run_agent",
    "load_model",
    "load_policy",
    "resolve_import",
]

_TOOL = (
    "path",
    "name",
    "side_effect",
    "needs_approval",
    "allow_response",
    "timeout_seconds",
    "idempotency_key",
    "sandbox",
)
_SCOPE = ("project", "environment", "principal", "labels")
_LIMITS = ("max_turns", "max_cost_usd", "max_input_tokens", "max_output_tokens")
_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_LOCAL_PACKAGE = "_oarlock_agent_"


def _choice(value: Any, key: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{key}: must be one of {', '.join(allowed)}, got {describe(value)}")
    return value


def _url(value: Any, key: str) -> str:
    if not isinstance(value, str) or not re.match(r"https?://\S+$", value):
        raise ConfigError(f"{key}: must be an http:// or https:// URL, got {describe(value)}")
    return value


# The types of the model options oarlock knows; the model string's adapter decides which
# options apply (others are refused by oarlock.models.load_model).
_OPTION_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "api": lambda v, k: _choice(v, k, ("chat", "responses")),
    "base_url": _url,
    "timeout": lambda v, k: need_number(v, k, positive=True),
    "max_output_tokens": lambda v, k: need_whole(v, k, minimum=1),
    "max_tokens": lambda v, k: need_whole(v, k, minimum=1),
    "api_key": lambda v, k: need_text(v, k, empty=False),
}


# -- imports -----------------------------------------------------------------------------


def _local_module(base: Path, name: str) -> Path | None:
    """The module or package ``name`` in the folder ``base``, if there is one."""
    for candidate in (base / f"{name}.py", base / name):
        if candidate.is_file() or (candidate.is_dir() and candidate.suffix == ""):
            return candidate
    return None


def _installed_origin(name: str) -> str | None:
    """Where the standard or installed module ``name`` comes from (None if none)."""
    if name in sys.builtin_module_names:
        return "built in"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin not in (None, "namespace"):
        return str(spec.origin)
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else name


def _same(origin: str, local: Path) -> bool:
    try:
        found = Path(origin).resolve()
    except (OSError, ValueError):
        return False
    return found in (local.resolve(), (local / "__init__.py").resolve())


def _local_package(base: Path) -> str:
    """The private package whose modules are those of the folder ``base``."""
    name = _LOCAL_PACKAGE + hashlib.sha256(os.fsencode(base)).hexdigest()[:16]
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(base)]
        sys.modules[name] = importlib.util.module_from_spec(spec)
    return name


def _import(module: str, where: str, base: Path | None) -> Any:
    top = module.partition(".")[0]
    local = _local_module(base, top) if base is not None else None
    full = module
    if base is not None and local is not None:
        origin = _installed_origin(top)
        if origin is None:
            full = f"{_local_package(base)}.{module}"
        elif not _same(origin, local):
            raise ConfigError(
                f"{where}: the module {top!r} next to the agent file ({local.name}) has the "
                f"name of a standard or installed module ({origin}), which an agent file "
                "cannot replace: rename it"
            )
    try:
        return importlib.import_module(full)
    except KeyboardInterrupt:
        raise
    except ModuleNotFoundError as exc:
        raise ConfigError(f"{where}: {_missing(module, exc.name, base)}") from None
    except SyntaxError as exc:
        raise ConfigError(
            f"{where}: cannot import {module!r}: syntax error in "
            f"{Path(exc.filename or module).name}, line {exc.lineno}: {exc.msg}"
        ) from None
    except (Exception, SystemExit) as exc:  # any failure of the module's own code
        text = str(exc)
        text = text if len(text) <= 200 else text[:200] + "…"
        raise ConfigError(
            f"{where}: importing {module!r} failed: {type(exc).__name__}"
            + (f": {text}" if text else "")
        ) from None


def _missing(module: str, name: str | None, base: Path | None) -> str:
    """Why ``module`` could not be imported, ``name`` being the module not found."""
    missing = name or module
    if missing.startswith(_LOCAL_PACKAGE):
        missing = missing.partition(".")[2]
    if module == missing or module.startswith(f"{missing}."):
        return f"cannot import {module!r}: no module named {missing!r}"
    hint = ""
    if base is not None and _local_module(base, missing.partition(".")[0]) is not None:
        hint = (
            f" (a module next to the agent file imports its neighbours relatively: "
            f"from . import {missing.partition('.')[0]})"
        )
    return f"importing {module!r} failed: it imports {missing!r}, which is not found{hint}"


def resolve_import(path: Any, where: str, base: Path | None = None) -> Any:
    """The object an import path (``package.module:name``) names. A module that is a file
    or folder in ``base`` (the agent file's folder) is imported as a module of that folder
    (see the module documentation). Every failure is a ConfigError naming ``where``."""
    if not isinstance(path, str):
        raise ConfigError(
            f"{where}: must be an import path like 'package.module:name', got {describe(path)}"
        )
    module, _, attr = path.partition(":")
    if not _IMPORT_PATH.fullmatch(module) or not _IMPORT_PATH.fullmatch(attr):
        raise ConfigError(
            f"{where}: {describe(path)} is not an import path like 'package.module:name'"
        )
    obj = _import(module, where, base)
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise ConfigError(f"{where}: module {module!r} has no {attr!r}") from None
    except Exception as exc:  # a module-level __getattr__ that fails
        raise ConfigError(f"{where}: {path!r}: {type(exc).__name__}: {exc}") from None
    return obj


# -- the parts of an agent file ----------------------------------------------------------


def _tool(entry: Any, where: str, base: Path, problems: Problems) -> Tool | None:
    """The tool of one ``tools`` entry, or None after adding its problems."""
    spec = {"path": entry} if isinstance(entry, str) else problems.check(need_mapping, entry, where)
    if spec is None:
        return None
    before = len(problems)
    problems.extend(unknown_keys(spec, where, _TOOL))
    changes: dict[str, Any] = {}
    if "name" in spec:
        changes["name"] = problems.check(need_text, spec["name"], at(where, "name"), empty=False)
    if "side_effect" in spec:
        changes["side_effect"] = problems.check(
            _choice, spec["side_effect"], at(where, "side_effect"), SIDE_EFFECT_CLASSES
        )
    if "allow_response" in spec:
        changes["allow_response"] = problems.check(
            need_bool, spec["allow_response"], at(where, "allow_response")
        )
    if spec.get("timeout_seconds") is not None:
        key = at(where, "timeout_seconds")
        changes["timeout_seconds"] = problems.check(
            need_number, spec["timeout_seconds"], key, positive=True
        )
    rule = spec.get("needs_approval")
    if isinstance(rule, bool):
        changes["needs_approval"] = rule
    elif rule is not None:
        key = at(where, "needs_approval")
        if isinstance(rule, str):
            changes["needs_approval"] = problems.check(resolve_import, rule, key, base)
        else:
            problems.add(f"{key}: must be true, false or an import path, got {describe(rule)}")
    if spec.get("idempotency_key") is not None:
        key = at(where, "idempotency_key")
        changes["idempotency_key"] = problems.check(
            resolve_import, spec["idempotency_key"], key, base
        )
    made: Tool | None = None
    if "path" not in spec:
        problems.add(f"{at(where, 'path')}: required (an import path like package.module:name)")
    else:
        obj = problems.check(resolve_import, spec["path"], at(where, "path"), base)
        if obj is not None:
            with problems.catch(where):
                made = _as_tool(obj, spec["path"])
    if made is not None and spec.get("sandbox") is not None:
        with problems.catch(at(where, "sandbox")):
            changes["sandbox"] = _tool_sandbox(made, spec["sandbox"])
    if made is None or len(problems) > before:
        return None
    with problems.catch(where):
        return dataclasses.replace(made, **changes)
    return None


def _tool_sandbox(made: Tool, value: Any) -> Any:
    """A tool entry's ``sandbox`` settings (``egress``, ``limits``, ``env``,
    ``allow_hosts``) over the tool's own (a built-in keeps its program)."""
    from oarlock.sandbox._limits import DEFAULT_LIMITS
    from oarlock.tools._tool import _sandbox_spec

    given = _sandbox_spec(value)
    assert given is not None
    if given.limits:
        DEFAULT_LIMITS.merged(given.limits)  # names and values checked here
    if made.sandbox is None:
        return given
    keep = {k: getattr(given, k) for k in value}
    return dataclasses.replace(made.sandbox, **keep)


def _as_tool(obj: Any, path: str) -> Tool:
    if isinstance(obj, Tool):
        return obj
    if not callable(obj):
        raise ConfigError(f"{path!r} is neither a tool nor a function")
    try:
        return tool(obj)
    except ConfigError:
        raise
    except Exception as exc:  # a callable whose signature or hints cannot be read
        raise ConfigError(
            f"{path!r} cannot be described to a model: {type(exc).__name__}: {exc}"
        ) from None


def _tools(value: Any, base: Path, problems: Problems) -> Toolset:
    toolset = Toolset()
    if value is None:
        return toolset
    if not isinstance(value, list):
        problems.add(f"tools: must be a list, got {describe(value)}")
        return toolset
    for i, entry in enumerate(value):
        made = _tool(entry, f"tools[{i}]", base, problems)
        if made is not None:
            with problems.catch(f"tools[{i}]"):
                toolset.add(made)
    return toolset


def _scope(value: Any, problems: Problems) -> dict[str, Any]:
    spec = problems.check(need_mapping, value, "scope")
    if spec is None:
        return {}
    problems.extend(unknown_keys(spec, "scope", _SCOPE))
    scope: dict[str, Any] = {}
    for key in ("project", "environment", "principal"):
        if spec.get(key) is not None:
            scope[key] = problems.check(need_text, spec[key], at("scope", key), empty=False)
    if spec.get("labels") is not None:
        labels = problems.check(need_mapping, spec["labels"], "scope.labels")
        for name, text in (labels or {}).items():
            problems.check(need_text, text, at("scope.labels", name))
        scope["labels"] = labels
    return scope


def _limits(value: Any, problems: Problems) -> Limits | None:
    spec = problems.check(need_mapping, value, "limits")
    if spec is None:
        return None
    problems.extend(unknown_keys(spec, "limits", _LIMITS))
    known = {k: v for k, v in spec.items() if k in _LIMITS and v is not None}
    return problems.check(Limits, **known)


def _model(spec: dict[str, Any], ref_base: Path, problems: Problems) -> ModelAdapter | None:
    before = len(problems)
    model = problems.check(need_text, spec.get("model"), "model", empty=False)
    options: dict[str, Any] = {}
    if spec.get("model_options") is not None:
        options = problems.check(need_mapping, spec["model_options"], "model_options") or {}
        for name, value in options.items():
            check = _OPTION_CHECKS.get(name)
            if check is not None:
                problems.check(check, value, at("model_options", name))
    if model is None or len(problems) > before:
        return None
    try:
        return load_model(model, ref_base, options)
    except ConfigError as exc:
        problems.record(exc, "model")
    except OarlockError as exc:
        problems.add(f"model: {exc.message}", exc.code)
    return None


def load_policy(spec: Any, base: Path) -> PolicyEngine | None:
    """The agent file's ``policy``: a rule policy file, or ``{cedar: FILE}`` (paths
    relative to ``base``)."""
    if spec is None:
        return None
    if isinstance(spec, dict) and set(spec) == {"cedar"}:
        cedar = need_text(spec["cedar"], "cedar", empty=False)
        from oarlock.governance._cedar import CedarPolicy

        return CedarPolicy.from_file(_relative(cedar, base))
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"must be a policy file's path or {{cedar: PATH}}, got {describe(spec)}")
    return RulePolicy.from_file(_relative(spec, base))


def _approvers(spec: Any, base: Path) -> TrustedApprovers | None:
    """The agent file's ``approvers``: an approvers file (relative to the agent file),
    checked now and followed afterwards (read again whenever it changes)."""
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"must be the path of an approvers file, got {describe(spec)}")
    return TrustedApprovers.from_file(_relative(spec, base))


_SANDBOX_KEYS = ("isolation", "limits", "allow_hosts", "workspaces")


def _sandbox_runner(spec: Any, base: Path) -> Any:
    """The agent file's ``sandbox``: the runner of its ``sandbox``-class calls (the least
    isolation, default limits, hosts an ``allowlist`` opens, the workspaces folder)."""
    from oarlock.sandbox._limits import DEFAULT_LIMITS
    from oarlock.sandbox._runner import SandboxRunner
    from oarlock.sandbox._workspace import Workspaces

    spec = need_mapping(spec, "sandbox")
    unknown = sorted(set(spec) - set(_SANDBOX_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} (allowed: {', '.join(_SANDBOX_KEYS)})")
    limits = DEFAULT_LIMITS.merged(need_mapping(spec.get("limits") or {}, "limits"))
    hosts = spec.get("allow_hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and ":" in h for h in hosts):
        raise ConfigError("allow_hosts: must be a list of host:port patterns")
    folder = spec.get("workspaces")
    workspaces = (
        None if folder is None else Workspaces(_relative(need_text(folder, "workspaces"), base))
    )
    return SandboxRunner(
        workspaces,
        isolation=need_text(spec.get("isolation", "auto"), "isolation"),
        limits=limits,
        allow_hosts=hosts,
    )


def _relative(path: str, base: Path) -> Path:
    if "\0" in path:
        raise ConfigError(f"{describe(path)} is not a path")
    p = Path(path)
    return p if p.is_absolute() else base / p


def _mcp_servers(value: Any, base: Path, problems: Problems) -> list[MCPServerConfig]:
    servers = problems.check(need_mapping, value, "mcp_servers")
    if not servers:
        return []
    try:
        from oarlock.tools._mcp import MCPServerConfig
    except ImportError:
        problems.add("mcp_servers: MCP servers need the mcp package: pip install 'oarlock[mcp]'")
        return []
    configs = []
    for name, entry in servers.items():
        config = problems.check(MCPServerConfig.from_dict, name, entry, base_dir=base)
        if config is not None:
            configs.append(config)
    return configs


# -- the agent file ----------------------------------------------------------------------


_KEYS = (
    "name",
    "instructions",
    "description",
    "model",
    "model_options",
    "tenant",
    "scope",
    "policy",
    "tools",
    "mcp_servers",
    "limits",
    "pricing",
    "approvers",
    "sandbox",
    "engine",
)
_ENGINES = ("native", "temporal")


@dataclass
class AgentFileCheck:
    """What loading an agent file found: every problem (each ``FILE: KEY: RULE``), and the
    agent when there is none."""

    path: str
    problems: Problems
    agent: Agent | None = None
    tools: Toolset = dataclasses.field(default_factory=Toolset)
    """The tools that loaded, whatever else failed."""
    mcp_servers: list[MCPServerConfig] = dataclasses.field(default_factory=list)
    """The MCP server entries that are valid, whatever else failed."""

    @property
    def ok(self) -> bool:
        return self.agent is not None and not self.problems


def _read(path: str | os.PathLike[str], name: str) -> Any:
    data = read_input(path, what="agent file", code="agent_file_invalid")
    text = decode_text(data, name, what="agent file", code="agent_file_invalid")
    return load_yaml(text, name, code="agent_file_invalid")


def _ref_base(path: str | os.PathLike[str], folder: Path) -> Path:
    """The folder the agent file's relative paths are taken from, as messages show it: the
    folder named in ``path`` (so that messages show paths like those the user typed),
    unless the agent file is a link, whose target's folder counts."""
    given = Path(path)
    try:
        return folder if given.is_symlink() else given.parent
    except (OSError, ValueError):
        return folder


def _optional(spec: dict[str, Any], key: str, default: Any) -> Any:
    """The value of an optional key; absent or null is the default."""
    value = spec.get(key)
    return default if value is None else value


def check_agent_file(path: str | os.PathLike[str]) -> AgentFileCheck:
    """Load an agent file, collecting every problem instead of stopping at the first: the
    file itself, every key, the tools (imported), the model (the script of a scripted
    model read), the policy file (read and compiled) and the MCP server entries. The
    servers are not started (see ``oarlock check``)."""
    name = os.fspath(path)
    problems = Problems(f"{name}: ")
    checked = AgentFileCheck(name, problems)
    try:
        raw = _read(path, name)
    except ConfigError as exc:
        checked.problems = Problems()
        checked.problems.record(exc)
        return checked
    spec = problems.check(need_mapping, raw, "the agent file")
    if spec is None:
        return checked
    problems.extend(unknown_keys(spec, "", _KEYS))
    folder = Path(name).resolve().parent
    ref_base = _ref_base(path, folder)
    agent_name = problems.check(need_text, spec.get("name"), "name", empty=False)
    instructions = problems.check(need_text, _optional(spec, "instructions", ""), "instructions")
    problems.check(need_text, _optional(spec, "description", ""), "description")
    tenant = problems.check(need_text, _optional(spec, "tenant", "default"), "tenant", empty=False)
    engine = problems.check(_engine, _optional(spec, "engine", "native"))
    scope = _scope(_optional(spec, "scope", {}), problems)
    limits = _limits(_optional(spec, "limits", {}), problems)
    prices = problems.check(PricingTable.parse, _optional(spec, "pricing", {}))
    model = _model(spec, ref_base, problems)
    policy = None
    if spec.get("policy") is not None:
        with problems.catch("policy"):
            policy = load_policy(spec["policy"], ref_base)
    approvers = None
    if spec.get("approvers") is not None:
        with problems.catch("approvers"):
            approvers = _approvers(spec["approvers"], ref_base)
    sandbox = None
    if spec.get("sandbox") is not None:
        with problems.catch("sandbox"):
            sandbox = _sandbox_runner(spec["sandbox"], ref_base)
    toolset = checked.tools = _tools(_optional(spec, "tools", []), folder, problems)
    servers = checked.mcp_servers = _mcp_servers(
        _optional(spec, "mcp_servers", {}), folder, problems
    )
    if problems or agent_name is None or model is None or tenant is None:
        return checked
    try:
        checked.agent = Agent(
            agent_name,
            model,
            instructions=instructions or "",
            tools=toolset,
            limits=limits,
            prices=prices,
            tenant=tenant,
            **scope,
            policy=policy,
            mcp_servers=servers,
            approvers=approvers,
            sandbox=sandbox,
        )
    except ConfigError as exc:  # a cost limit on a model without a price
        problems.record(exc, "limits.max_cost_usd" if exc.code == "unpriced_model" else "")
        return checked
    checked.agent.engine = engine or "native"
    return checked


def _engine(value: Any) -> str:
    if value not in _ENGINES:
        raise ConfigError(f"engine: must be one of {', '.join(_ENGINES)}, got {value!r}")
    return str(value)


def load_agent(path: str | Path) -> Agent:
    """Build the agent an agent file describes. A ConfigError lists every problem the file
    has, each naming the file, the key and the rule broken."""
    checked = check_agent_file(path)
    if checked.agent is None:
        if not checked.problems:  # pragma: no cover - a file without an agent has problems
            checked.problems.add("cannot be loaded")
        raise checked.problems.error(os.fspath(path))
    return checked.agent


_IMPORTED_AGENT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _imported_agent(agent_ref: str, run_id: str) -> Agent:
    """The Agent an import path (``package.module:name``) names."""
    found = resolve_import(agent_ref, f"run {run_id}: agent {agent_ref}")
    if not isinstance(found, Agent):
        raise ConfigError(
            f"run {run_id}: {agent_ref} is a {type(found).__name__}, not an Agent",
            code="agent_ref_invalid",
        )
    return found


def run_agent(agent_ref: str | None, model: str, run_id: str) -> Agent:
    """The agent of a stored run: its agent file's (``agent_ref``), with the model the run
    was started with (``run --model`` may have named another than the file's). Its trust
    follows its approvers file, or, for a file that names none, this process's key and the
    user's approvers file, each read again when it changes (see
    :mod:`oarlock.governance._approvers`): an agent kept by a long-lived process (a worker)
    never holds on to the trust it found when it was loaded. OarlockError (code
    ``no_agent_ref``) for a run with no agent file on record; ConfigError for a file that
    does not load."""
    if not agent_ref:
        raise OarlockError(
            f"run {run_id} has no agent on record: resume it from Python with its Agent, or "
            "start runs with an agent another process can find (an agent file; an Agent at "
            "the top level of a module; Runner.start(..., agent_ref='package.module:agent'))",
            code="no_agent_ref",
        )
    base = Path(agent_ref).parent
    if _IMPORTED_AGENT.fullmatch(agent_ref) and not Path(agent_ref).exists():
        agent = _imported_agent(agent_ref, run_id)
        base = Path.cwd()
    else:
        agent = load_agent(agent_ref)
    if model != agent.model.model_id:
        try:
            agent = agent.with_model(load_model(model, base))
        except ConfigError as exc:
            raise ConfigError(f"run {run_id} uses model {model}: {exc}", code=exc.code) from None
    return agent
