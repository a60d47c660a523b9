"""Tools: Python functions, sync or async, whose JSON Schema comes from their type hints
and docstring, each with a declared side-effect class."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from oarlock._config import describe, need_bool, need_number
from oarlock.errors import ConfigError, OarlockError, ToolError
from oarlock.formats._jcs import portable_problem
from oarlock.formats._models import SideEffectClass
from oarlock.formats._rules import SIDE_EFFECT_CLASSES
from oarlock.tools._sync import SyncCaller

if TYPE_CHECKING:
    from oarlock.sandbox._call import SandboxSpec
    from oarlock.tools._context import RunContext

__all__ = [
    "ApprovalRule",
    "CAUTIOUS_CLASS",
    "KeyRule",
    "Tool",
    "ToolArgumentsError",
    "ToolEffect",
    "ToolOutput",
    "Toolset",
    "tool",
]

_MAX_TIMEOUT = 7 * 86400  # a week: beyond that, a timeout is not one
CAUTIOUS_CLASS: SideEffectClass = "spend"
"""The class of a tool that declares none: the most cautious, never ``read``."""

ApprovalRule = bool | Callable[[dict[str, Any]], bool] | None
"""Whether a call needs a human: a flag, a predicate over the arguments, or None for the
side-effect class's default. ``shared-write`` and above always need an approval (a human's,
or a policy rule's standing one); the rule can only add the need to ``read`` and
``sandbox`` tools."""


KeyRule = Callable[[dict[str, Any]], str] | None
"""How a call's idempotency key is made: None for one key per call of a run, or a function
of the arguments (a refund keyed by its order id, so that no two runs refund one order)."""


class ToolArgumentsError(ToolError):
    code = "invalid_arguments"


@dataclass(frozen=True, slots=True)
class ToolEffect:
    """What a side-effecting call did in the world, as its receipt records it."""

    kind: str
    external_reference: str | None = None
    reversible: bool | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's return value with the effect it reports; return a plain value otherwise."""

    value: Any
    effect: ToolEffect | None = None


def _doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The summary and the per-argument descriptions of a Google- or Sphinx-style docstring."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section, current, indent = "summary", "", -1
    for line in (inspect.getdoc(fn) or "").splitlines():
        text = line.strip()
        depth = len(line) - len(line.lstrip())
        sphinx = re.match(r":param\s+(?:[\w\[\], |]+\s+)?(\w+):\s*(.*)", text)
        if sphinx:
            section, current = "args", sphinx.group(1)
            params[current] = sphinx.group(2)
        elif re.fullmatch(r"(Args|Arguments|Parameters):", text):
            section, indent = "args", -1
        elif re.fullmatch(r"[A-Z][a-z]+( [a-z]+)?:", text):
            section = "other"
        elif section == "summary":
            summary.append(line)
        elif section == "args" and text:
            entry = re.match(r"(\w+)\s*(?:\([^)]*\))?:\s*(.*)", text)
            if entry and (indent < 0 or depth <= indent):
                indent, current = depth, entry.group(1)
                params[current] = entry.group(2)
            elif current:
                params[current] = f"{params[current]} {text}".strip()
    return "\n".join(summary).strip(), params


def _context_param(fn: Callable[..., Any]) -> str | None:
    """The parameter that asks for the run's :class:`RunContext`, if one does."""
    from oarlock.tools._context import is_run_context

    hints = get_type_hints(fn, include_extras=True)
    found = [p for p in inspect.signature(fn).parameters if is_run_context(hints.get(p))]
    if len(found) > 1:
        raise ConfigError(f"tool {fn.__name__!r}: one parameter at most takes the RunContext")
    return found[0] if found else None


def _arguments_model(fn: Callable[..., Any], name: str, docs: dict[str, str]) -> type[BaseModel]:
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context = _context_param(fn)
    for pname, param in inspect.signature(fn).parameters.items():
        if pname == context:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(f"tool {name!r}: *args and **kwargs cannot be described to a model")
        if pname not in hints:
            raise ConfigError(f"tool {name!r}: parameter {pname!r} needs a type hint")
        default = ... if param.default is param.empty else param.default
        fields[pname] = (hints[pname], Field(default, description=docs.get(pname)))
    config = ConfigDict(extra="forbid", title=name)
    return create_model(f"{name}_arguments", __config__=config, **fields)


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


@dataclass(eq=False)
class Tool:
    """A function the model may call. Build one with :func:`tool`."""

    fn: Callable[..., Any]
    name: str
    description: str
    side_effect: SideEffectClass
    needs_approval: ApprovalRule = None
    allow_response: bool = False
    timeout_seconds: float | None = None
    schema_version: str = "1"
    idempotency_key: KeyRule = None
    mcp_server_id: str | None = None
    sandbox: SandboxSpec | None = None  # how a ``sandbox``-class call runs in the sandbox
    context_param: str | None = None  # the parameter that receives the RunContext
    blocking: bool | None = None  # a def tool: thread, loop or learn (tools/_sync.py)
    arguments_model: type[BaseModel] = field(repr=False, default=BaseModel)
    parameters: dict[str, Any] = field(repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigError(f"a tool's name must be a string, not {describe(self.name)}")
        if self.timeout_seconds is not None:
            need_number(self.timeout_seconds, f"tool {self.name!r}: timeout_seconds", positive=True)
        need_bool(self.allow_response, f"tool {self.name!r}: allow_response")
        for key in ("needs_approval", "idempotency_key"):
            rule = getattr(self, key)
            flag = key == "needs_approval" and isinstance(rule, bool)
            if not (rule is None or flag or callable(rule)):
                problem = f"must be a function, got {describe(rule)}"
                raise ConfigError(f"tool {self.name!r}: {key}: {problem}")
        if self.side_effect not in SIDE_EFFECT_CLASSES:
            raise ConfigError(
                f"tool {self.name!r}: unknown side-effect class "
                f"{self.side_effect!r}; use one of {', '.join(SIDE_EFFECT_CLASSES)}"
            )
        if self.needs_approval is False and self.side_effect not in ("read", "sandbox"):
            raise ConfigError(
                f"tool {self.name!r}: needs_approval=False cannot waive the approval a "
                f"{self.side_effect!r} tool needs; allow it in a policy rule instead (a "
                "standing approval, recorded for every call)"
            )
        timeout = self.timeout_seconds
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= _MAX_TIMEOUT
        ):
            raise ConfigError(
                f"tool {self.name!r}: timeout_seconds must be a number of seconds above 0 "
                f"and at most {_MAX_TIMEOUT}, not {timeout!r}"
            )
        self.is_async = inspect.iscoroutinefunction(self.fn)
        if self.blocking is not None and not isinstance(self.blocking, bool):
            raise ConfigError(f"tool {self.name!r}: blocking must be true, false or unset")
        if self.blocking is False and timeout is not None:
            raise ConfigError(
                f"tool {self.name!r}: blocking=False calls it on the event loop, where its "
                "timeout_seconds could not stop it; give one or the other"
            )
        self._sync = SyncCaller(
            self.fn,
            blocking=self.blocking,
            learns=self.side_effect == "read" and timeout is None,
        )

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as the tool will receive them; raises ToolArgumentsError (code
        ``arguments_not_canonical`` for arguments that cannot be hashed exactly: a number
        of magnitude 2**53 or more, NaN, a lone surrogate; nothing is run or recorded
        for them)."""
        problem = portable_problem(arguments)
        if problem is not None:
            raise ToolArgumentsError(
                f"invalid arguments for tool {self.name!r}: {problem}",
                code="arguments_not_canonical",
            )
        try:
            parsed = self.arguments_model.__pydantic_validator__.validate_python(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ToolArgumentsError(
                f"invalid arguments for tool {self.name!r}: {problems}"
            ) from None
        return dict(parsed.__dict__)  # the fields, in their order (extra members aside)

    def requires_approval(self, arguments: dict[str, Any]) -> bool:
        """Whether the tool itself asks for a human: always for ``shared-write`` and
        above; for ``read`` and ``sandbox`` when its rule says so."""
        rule = self.needs_approval
        if self.side_effect not in ("read", "sandbox"):
            return True
        if rule is None:
            return False
        if isinstance(rule, bool):
            return rule
        return bool(rule(arguments))

    async def call(self, arguments: dict[str, Any], context: RunContext[Any] | None = None) -> Any:
        """Run the tool on validated arguments (a sync tool in a worker thread, or on the
        loop once it has shown itself quick: see :mod:`oarlock.tools._sync`); a tool that
        asks for the run's context gets ``context``. A ``sandbox``-class tool never runs
        here, in the host's process: the governed executor hands it to the sandbox."""
        if self.side_effect == "sandbox":
            raise ToolError(
                f"tool {self.name!r} is of the sandbox class: it runs only in the sandbox, "
                "through the governed executor",
                code="sandbox_only",
            )
        if self.context_param is not None:
            if context is None:
                raise ToolError(
                    f"tool {self.name!r} needs the run's context, and none was given",
                    code="context_missing",
                )
            arguments = {**arguments, self.context_param: context}
        if self.is_async:
            return await self.fn(**arguments)
        return await self._sync(arguments)

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = ...,
    side_effect: SideEffectClass | None = ...,
    needs_approval: ApprovalRule = ...,
    allow_response: bool = ...,
    timeout_seconds: float | None = ...,
    description: str | None = ...,
    schema_version: str = ...,
    idempotency_key: KeyRule = ...,
    sandbox: SandboxSpec | Mapping[str, Any] | None = ...,
    blocking: bool | None = ...,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    side_effect: SideEffectClass | None = None,
    needs_approval: ApprovalRule = None,
    allow_response: bool = False,
    timeout_seconds: float | None = None,
    description: str | None = None,
    schema_version: str = "1",
    idempotency_key: KeyRule = None,
    sandbox: SandboxSpec | Mapping[str, Any] | None = None,
    blocking: bool | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a tool. ``side_effect`` defaults to the most cautious class.

    ``allow_response`` lets a human answer in the tool's place (the ``responded``
    decision). ``idempotency_key`` derives the call's key from its arguments. ``blocking``
    (a ``def`` function): True runs it in a worker thread always, False on the event loop
    always; unset, a ``read`` tool moves to the loop once it has shown itself quick
    (:mod:`oarlock.tools._sync`)."""

    def build(f: Callable[..., Any]) -> Tool:
        tool_name = name or f.__name__
        summary, docs = _doc_parts(f)
        model = _arguments_model(f, tool_name, docs)
        return Tool(
            fn=f,
            name=tool_name,
            description=description or summary,
            side_effect=side_effect or CAUTIOUS_CLASS,
            needs_approval=needs_approval,
            allow_response=allow_response,
            timeout_seconds=timeout_seconds,
            schema_version=schema_version,
            idempotency_key=idempotency_key,
            sandbox=_sandbox_spec(sandbox),
            context_param=_context_param(f),
            blocking=blocking,
            arguments_model=model,
            parameters=_strip_titles(model.model_json_schema()),
        )

    return build(fn) if fn is not None else build


SANDBOX_SETTINGS = ("egress", "limits", "env", "allow_hosts")
"""What a tool's ``sandbox`` settings may name (see :class:`oarlock.sandbox.SandboxSpec`)."""


def _sandbox_spec(value: SandboxSpec | Mapping[str, Any] | None) -> SandboxSpec | None:
    """A tool's sandbox settings: a SandboxSpec, or a mapping of its fields (``egress``,
    ``limits``, ``env``, ``allow_hosts``)."""
    if value is None:
        return None
    from oarlock.sandbox._call import SandboxSpec

    if isinstance(value, SandboxSpec):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"sandbox settings must be a mapping, not {describe(value)}")
    unknown = sorted(set(value) - set(SANDBOX_SETTINGS))
    if unknown:
        raise ConfigError(f"unknown sandbox setting {unknown[0]!r}")
    try:
        return SandboxSpec(
            egress=value.get("egress", "none"),
            limits=value.get("limits"),
            env=tuple(value.get("env") or ()),
            allow_hosts=tuple(value.get("allow_hosts") or ()),
        )
    except OarlockError as exc:
        raise ConfigError(str(exc), code=exc.code) from None


def result_text(value: Any) -> str:
    """The text a tool result gives the model."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, ensure_ascii=False, default=str)


class Toolset:
    """The tools of an agent, by name."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._specs: list[dict[str, Any]] | None = None
        for t in tools:
            self.add(t if isinstance(t, Tool) else tool(t))

    def add(self, t: Tool) -> None:
        if t.name in self._tools:
            raise ConfigError(f"two tools are named {t.name!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", t.name):
            raise ConfigError(f"tool name {t.name!r}: use 1-64 letters, digits, _ . -")
        self._tools[t.name] = t
        self._specs = None

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)
        self._specs = None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """The schemas the model is shown (built once; the runner asks every turn)."""
        if self._specs is None:
            self._specs = [t.spec() for t in self._tools.values()]
        return self._specs

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
