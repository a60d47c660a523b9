"""Tool-call policy: the verdict (allow, deny, require_approval) for every governed call.

A policy file is YAML. Rules are tried in order; the first rule that matches decides::

    policy: refunds-desk          # the policy id (required)
    approval_ttl: 3600            # optional: deadline in seconds of the approvals it asks for
    rules:
      - id: block-prod-deploys    # required, unique
        effect: deny              # allow | deny | require_approval
        reason: Production deploys go through the release train    # optional
        match:                    # optional; a rule without match matches every call
          tool: "deploy*"         # a glob (fnmatch, case-sensitive) or a list of globs
          class: production       # a side-effect class or a list of classes
          scope:                  # every key must match
            environment: prod     # a string (equals) or a list of strings (in)
            labels.team: [payments, billing]
      - id: small-refunds-acme
        effect: allow
        approval_ttl: 600         # optional, not on deny rules
        match:
          tool: issue_refund
          scope: {tenantId: acme}
          arguments:              # every condition must hold
            amount: {gte: 1, lte: 50}
            currency: {in: [EUR, USD]}
            customer.tier: {equals: gold}    # dotted path into nested objects
            items.0.sku: {matches: "^SKU-"}  # a number steps into a list

``match`` keys: ``tool``, ``class`` (read, sandbox, shared-write, external, production,
publication, spend), ``scope`` and ``arguments``. Scope keys are ``tenantId``,
``projectId``, ``environment``, ``principalId`` and ``labels.<name>``; a scope value the
call does not carry never matches. Argument conditions:

``equals``  exact JSON equality: ``1`` equals ``1.0``, but ``true`` is not ``1``
``in``      a list of JSON values; equals one of them
``lt``, ``lte``, ``gt``, ``gte``  number comparisons; a boolean, string or other
            non-number argument never matches (``"50"`` is not 50)
``matches`` a regular expression found anywhere in a string argument (use ``^`` and ``$``
            to anchor it)

Each part of a dotted path looks up a key of an object; a part made of digits also
indexes a list. A missing argument makes its condition false.

Regular expressions and globs run in time linear in the argument, whatever the model
sends: they are RE2's (:mod:`oarlock.governance._regex`), Python's syntax but for
backreferences, lookaround, atomic groups and possessive quantifiers, which are refused
when the policy is loaded. ``$`` matches only at the very end (Python's also before a
final newline); ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII (``\\p{Nd}``, ``\\pL``
are Unicode); ``{,n}`` is refused (write ``{0,n}``); ``\\Z`` is read as RE2's ``\\z``.

A file is checked completely when it is loaded: unknown keys, wrong types, bad regular
expressions, duplicate rule ids or YAML keys, unknown effects or classes raise
:class:`~oarlock.errors.ConfigError` (code ``policy_invalid``) naming the rule and the
key. YAML 1.1 reads bare ``yes``/``no``/``on``/``off`` as booleans: quote them.

When no rule matches, :func:`default_verdict` decides: ``read`` and ``sandbox`` calls are
allowed unless the tool itself asks for a human; ``shared-write`` and above need an
approval. A call of an unregistered tool, or with an unknown side-effect class, is
denied before any rule is tried.

An ``allow`` of a call that needs an approval (class ``shared-write`` and above, or a
tool that asks for a human) is a standing approval given by the rule; its lifetime is
the rule's ``approval_ttl``. A ``require_approval`` verdict carries the deadline of the
approval it asks for: the rule's ``approval_ttl``, else the policy's.

A ``require_approval`` rule may say ``four_eyes: true``: the approval it asks for may not
be given by whoever started the run (``oarlock serve`` refuses it, ``four_eyes``).

``version`` is the digest (RFC 8785 JSON, SHA-256) of the parsed policy: the same
content always has the same version, comments and formatting aside.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, Protocol, runtime_checkable

from oarlock._config import Problems, describe
from oarlock._input import MAX_DEPTH, decode_text, read_input
from oarlock._yaml import load_yaml
from oarlock.errors import ConfigError
from oarlock.formats._jcs import INT_MAX, digest
from oarlock.formats._rules import APPROVAL_REQUIRED_CLASSES, SIDE_EFFECT_CLASSES
from oarlock.governance._regex import PatternError, glob_matcher, regex_searcher

__all__ = [
    "DEFAULT_POLICY",
    "Effect",
    "PolicyEngine",
    "PolicyRequest",
    "PolicyVerdict",
    "RulePolicy",
    "default_verdict",
]

Effect = Literal["allow", "deny", "require_approval"]
_EFFECTS: tuple[Effect, ...] = ("allow", "deny", "require_approval")
_CLASSES = frozenset(SIDE_EFFECT_CLASSES)
_SCOPE_KEYS = ("tenantId", "projectId", "environment", "principalId")
_CONDITIONS = ("equals", "in", "lt", "lte", "gt", "gte", "matches")
_NUM = (int, float)
_MISSING: Any = object()
_CACHE_MAX = 4096


@dataclass(frozen=True, slots=True)
class PolicyRequest:
    """One tool call as the policy sees it."""

    tool: str
    side_effect_class: str
    scope: Mapping[str, Any]
    arguments: Mapping[str, Any]
    known_tool: bool = True
    tool_requires_approval: bool = False


@dataclass(frozen=True, slots=True)
class PolicyVerdict:
    """What the policy decided, which rule decided (None for a default) and why."""

    effect: Effect
    rule_id: str | None
    reasons: tuple[str, ...]
    approval_ttl_seconds: float | None = None
    sandbox_egress: str | None = None  # the egress profile a sandboxed call must get
    sandbox_isolation: str | None = None  # the least isolation it may run under
    four_eyes: bool = False  # the approval it asks for: not by whoever started the run


@runtime_checkable
class PolicyEngine(Protocol):
    """Anything that turns a :class:`PolicyRequest` into a :class:`PolicyVerdict`."""

    policy_id: str
    version: str

    def evaluate(self, request: PolicyRequest) -> PolicyVerdict: ...


def needs_approval(request: PolicyRequest) -> bool:
    """Whether the call needs a human unless a policy gives a standing approval."""
    return request.side_effect_class in APPROVAL_REQUIRED_CLASSES or bool(
        request.tool_requires_approval
    )


def _precheck(request: PolicyRequest) -> PolicyVerdict | None:
    if not request.known_tool:
        return PolicyVerdict("deny", None, (f"tool {request.tool!r} is not registered",))
    cls = request.side_effect_class
    if not isinstance(cls, str) or cls not in _CLASSES:
        return PolicyVerdict("deny", None, (f"unknown side-effect class {cls!r}",))
    return None


def _defaults(ttl: float | None) -> tuple[dict[str, PolicyVerdict], PolicyVerdict]:
    """The default verdict of each class, and that of a tool asking for a human."""
    table: dict[str, PolicyVerdict] = {}
    for cls in SIDE_EFFECT_CLASSES:
        if cls in APPROVAL_REQUIRED_CLASSES:
            why = f"no rule matched; {cls!r} calls need an approval"
            table[cls] = PolicyVerdict("require_approval", None, (why,), ttl)
        else:
            table[cls] = PolicyVerdict(
                "allow", None, (f"no rule matched; {cls!r} calls are allowed",)
            )
    why = "no rule matched; the tool asks for a human approval"
    return table, PolicyVerdict("require_approval", None, (why,), ttl)


_DEFAULTS = _defaults(None)


def _fallback(
    request: PolicyRequest, table: tuple[dict[str, PolicyVerdict], PolicyVerdict]
) -> PolicyVerdict:
    verdict = table[0][request.side_effect_class]
    if verdict.effect == "allow" and request.tool_requires_approval:
        return table[1]
    return verdict


def default_verdict(request: PolicyRequest) -> PolicyVerdict:
    """The verdict when no rule matches (see the module documentation)."""
    return _precheck(request) or _fallback(request, _DEFAULTS)


# -- argument matching ------------------------------------------------------------------

Test = Callable[[Any], bool]


_KINDS = (
    ("bool", bool),
    ("num", _NUM),
    ("str", str),
    ("null", type(None)),
    ("list", list | tuple),
    ("dict", Mapping),
)


def _kind(v: Any) -> str | None:
    return next((kind for kind, types in _KINDS if isinstance(v, types)), None)


def _json_eq(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, booleans apart from numbers, containers deeply."""
    kind = _kind(a)
    if kind is None or kind != _kind(b):
        return False
    if kind == "list":
        return len(a) == len(b) and all(_json_eq(x, y) for x, y in zip(a, b, strict=True))
    if kind == "dict":
        return len(a) == len(b) and all(k in a and _json_eq(a[k], v) for k, v in b.items())
    return bool(a == b)


def _equals(e: Any) -> Test:
    kind = _kind(e)
    if kind == "str":
        return lambda v: type(v) is str and v == e
    if kind == "num":
        return lambda v: type(v) in _NUM and v == e
    if kind == "bool":
        return lambda v: type(v) is bool and v is e
    if kind == "null":
        return lambda v: v is None
    return lambda v: _json_eq(v, e)


def _one_of(values: list[Any]) -> Test:
    if all(type(v) is str for v in values):
        strings = frozenset(values)
        return lambda v: type(v) is str and v in strings
    tests = [_equals(e) for e in values]
    return lambda v: any(test(v) for test in tests)


_COMPARE: dict[str, Callable[[float], Test]] = {
    "lt": lambda b: lambda v: type(v) in _NUM and v < b,
    "lte": lambda b: lambda v: type(v) in _NUM and v <= b,
    "gt": lambda b: lambda v: type(v) in _NUM and v > b,
    "gte": lambda b: lambda v: type(v) in _NUM and v >= b,
}


def _lookup(value: Any, path: tuple[tuple[str, int | None], ...]) -> Any:
    for name, index in path:
        if type(value) is dict or isinstance(value, Mapping):
            value = value.get(name, _MISSING)
            if value is _MISSING:
                return _MISSING
        elif index is not None and type(value) is list and index < len(value):
            value = value[index]
        else:
            return _MISSING
    return value


# -- compiled rules ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    id: str
    tools: Callable[[str], bool] | None
    classes: frozenset[str] | None
    scope: tuple[tuple[str, str | None, frozenset[str]], ...]
    args: tuple[tuple[tuple[tuple[str, int | None], ...], tuple[Test, ...]], ...]
    verdict: PolicyVerdict  # for a call that needs no approval
    standing: PolicyVerdict  # the same rule deciding a call that needs one

    def matches(self, scope: Mapping[str, Any], args: Any) -> bool:
        for key, label, allowed in self.scope:
            v = scope.get(key)
            if label is not None:
                v = v.get(label) if isinstance(v, Mapping) else None
            if not isinstance(v, str) or v not in allowed:
                return False
        for path, tests in self.args:
            v = _lookup(args, path)
            if v is _MISSING:
                return False
            for test in tests:
                if not test(v):
                    return False
        return True


def _fail(where: str, message: str) -> NoReturn:
    raise ConfigError(f"{where}: {message}", code="policy_invalid")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()} (quote YAML words like yes/no/on/off)"
    if isinstance(value, str | int | float) or value is None:
        return describe(value)
    return "a list" if isinstance(value, list | tuple) else "a mapping"


def _keys(
    value: Any, where: str, problems: Problems, allowed: tuple[str, ...] = ()
) -> dict[Any, Any] | None:
    """The entries of the mapping ``value`` whose keys are ``allowed`` (any key if none
    given); a problem for each other key; None (and a problem) if it is no mapping."""
    if not isinstance(value, dict):
        problems.add(f"{where or 'policy file'}: expected a mapping, got {_show(value)}")
        return None
    known = {}
    for key, item in value.items():
        if allowed and key not in allowed:
            name = f"{where}.{key}" if where else str(key)
            problems.add(f"{name}: unknown key; use {', '.join(allowed)}")
        else:
            known[key] = item
    return known


def _strings(value: Any, where: str, what: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items:
        _fail(where, "an empty list never matches")
    for item in items:
        if not isinstance(item, str):
            _fail(where, f"expected {what} or a list of them, got {_show(item)}")
    return items


def _ttl(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, _NUM) or not value > 0:
        _fail(where, f"expected a positive number of seconds, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        _fail(where, f"expected a finite number of seconds, got {_show(value)}")
    return float(value)


def _condition(name: str, value: Any, where: str) -> Test:
    if name == "equals":
        return _equals(value)
    if name == "in":
        if not isinstance(value, list) or not value:
            _fail(where, f"expected a non-empty list of values, got {_show(value)}")
        return _one_of(value)
    if name == "matches":
        if not isinstance(value, str):
            _fail(where, f"expected a regular expression, got {_show(value)}")
        try:
            found = regex_searcher(value)
        except PatternError as exc:
            _fail(where, f"bad regular expression {describe(value)}: {exc}")
        return lambda v: isinstance(v, str) and found(v)
    if isinstance(value, bool) or not isinstance(value, _NUM):
        _fail(where, f"expected a number, got {_show(value)}")
    return _COMPARE[name](value)


def _globs(globs: list[str], where: str) -> Callable[[str], bool]:
    try:
        return glob_matcher(globs)
    except PatternError as exc:
        _fail(where, f"bad glob: {exc}")


def _arguments(raw: Any, where: str, problems: Problems) -> tuple[Any, ...]:
    compiled = []
    for name, conditions in (_keys(raw, where, problems) or {}).items():
        at = f"{where}.{name}"
        parts = name.split(".") if isinstance(name, str) else [""]
        if not all(parts):
            problems.add(f"{at}: an argument path is names joined by dots, like customer.tier")
            continue
        if not isinstance(conditions, dict) or not conditions:
            problems.add(f"{at}: expected conditions like {{equals: 5}}, got {_show(conditions)}")
            continue
        tests = []
        for kind, value in conditions.items():
            if kind not in _CONDITIONS:
                problems.add(f"{at}: unknown condition {kind!r}; use {', '.join(_CONDITIONS)}")
                continue
            test = problems.check(_condition, kind, value, f"{at}.{kind}")
            if test is not None:
                tests.append(test)
        path = tuple((p, int(p) if p.isascii() and p.isdigit() else None) for p in parts)
        compiled.append((path, tuple(tests)))
    return tuple(compiled)


def _scope(
    raw: Any, where: str, problems: Problems
) -> tuple[tuple[str, str | None, frozenset[str]], ...]:
    compiled = []
    for key, value in (_keys(raw, where, problems) or {}).items():
        at = f"{where}.{key}"
        field, _, label = str(key).partition(".")
        if not (key in _SCOPE_KEYS or (field == "labels" and label)):
            problems.add(f"{at}: unknown scope key; use {', '.join(_SCOPE_KEYS)} or labels.<name>")
            continue
        strings = problems.check(_strings, value, at, "a string")
        if strings is not None:
            compiled.append((field, label or None, frozenset(strings)))
    return tuple(compiled)


_RULE_KEYS = ("id", "effect", "reason", "approval_ttl", "four_eyes", "sandbox", "match")
_SANDBOX_KEYS = ("egress", "isolation")
_EGRESS = ("none", "loopback", "allowlist", "host")
_ISOLATION = ("bubblewrap", "unshare")
_MATCH_KEYS = ("tool", "class", "scope", "arguments")


def _compile(raw: Any, index: int, default_ttl: float | None, problems: Problems) -> _Rule | None:
    """The rule ``raw`` compiled, or None after adding every problem it has."""
    where = f"rules[{index}]"
    if not isinstance(raw, dict):
        problems.add(f"{where}: expected a mapping, got {_show(raw)}")
        return None
    before = len(problems)
    rule_id = raw.get("id")
    ctx = where
    if not isinstance(rule_id, str) or not rule_id:
        problems.add(f"{where}.id: required, a non-empty string; got {_show(rule_id)}")
    else:
        ctx = f"rule {rule_id!r} ({where})"
    for key in raw:
        if key not in _RULE_KEYS:
            problems.add(f"{ctx}: {key}: unknown key; use {', '.join(_RULE_KEYS)}")
    effect = raw.get("effect")
    if effect not in _EFFECTS:
        problems.add(f"{ctx}: effect: expected one of {', '.join(_EFFECTS)}, got {_show(effect)}")
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        problems.add(f"{ctx}: reason: expected a string, got {_show(reason)}")
    ttl = None
    if "approval_ttl" in raw:
        if effect == "deny":
            problems.add(f"{ctx}: approval_ttl: a deny rule gives or asks for no approval")
        else:
            ttl = problems.check(_ttl, raw["approval_ttl"], f"{ctx}: approval_ttl")
    four_eyes = _four_eyes(raw, effect, ctx, problems)
    egress, isolation = _sandbox(raw, effect, ctx, problems)
    match = _keys(raw.get("match", {}), f"{ctx}: match", problems, _MATCH_KEYS) or {}
    tools = None
    if "tool" in match:
        globs = problems.check(_strings, match["tool"], f"{ctx}: match.tool", "a glob")
        if globs is not None:
            tools = problems.check(_globs, globs, f"{ctx}: match.tool")
    classes = None
    if "class" in match:
        named = problems.check(_strings, match["class"], f"{ctx}: match.class", "a class")
        classes = frozenset(named or ())
        for cls in sorted(classes - _CLASSES):
            known = ", ".join(SIDE_EFFECT_CLASSES)
            problems.add(f"{ctx}: match.class: unknown side-effect class {cls!r}; use {known}")
    scope = _scope(match.get("scope", {}), f"{ctx}: match.scope", problems)
    arguments = _arguments(match.get("arguments", {}), f"{ctx}: match.arguments", problems)
    if len(problems) > before or not isinstance(rule_id, str) or effect not in _EFFECTS:
        return None
    why = (reason or f"rule {rule_id!r} matched",)
    standing = PolicyVerdict(effect, rule_id, why, ttl, egress, isolation)
    verdict = PolicyVerdict(effect, rule_id, why, None, egress, isolation)
    if effect == "require_approval":
        ttl = ttl or default_ttl
        verdict = standing = PolicyVerdict(
            effect, rule_id, why, ttl, egress, isolation, four_eyes
        )
    return _Rule(rule_id, tools, classes, scope, arguments, verdict, standing)


def _four_eyes(raw: dict[str, Any], effect: Any, ctx: str, problems: Problems) -> bool:
    """A rule's ``four_eyes``: whether whoever started the run may not approve the call."""
    value = raw.get("four_eyes", False)
    if not isinstance(value, bool):
        problems.add(f"{ctx}: four_eyes: expected true or false, got {_show(value)}")
        return False
    if value and effect != "require_approval":
        problems.add(f"{ctx}: four_eyes: only a require_approval rule asks for an approver")
    return bool(value)


def _sandbox(
    raw: dict[str, Any], effect: Any, ctx: str, problems: Problems
) -> tuple[str | None, str | None]:
    """A rule's ``sandbox: {egress, isolation}``: what a sandboxed call it lets run must
    get (``egress: host`` is granted only this way)."""
    if "sandbox" not in raw:
        return None, None
    if effect == "deny":
        problems.add(f"{ctx}: sandbox: a deny rule runs nothing")
        return None, None
    spec = _keys(raw["sandbox"], f"{ctx}: sandbox", problems, _SANDBOX_KEYS) or {}
    egress, isolation = spec.get("egress"), spec.get("isolation")
    if egress is not None and egress not in _EGRESS:
        problems.add(
            f"{ctx}: sandbox.egress: expected one of {', '.join(_EGRESS)}, got {_show(egress)}"
        )
        egress = None
    if isolation is not None and isolation not in _ISOLATION:
        problems.add(
            f"{ctx}: sandbox.isolation: expected one of {', '.join(_ISOLATION)}, "
            f"got {_show(isolation)}"
        )
        isolation = None
    return egress, isolation


def _plain(value: Any, where: str, problems: Problems, depth: int = 0) -> Any:
    """A JSON copy of ``value`` (mappings become dicts, tuples lists); a problem for each
    value that is not JSON (and None in its place)."""
    if depth > MAX_DEPTH:
        problems.add(f"{where}: nested deeper than {MAX_DEPTH} levels")
        return None
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                problems.add(f"{where or 'policy'}: keys must be strings, got {_show(key)}")
                continue
            out[key] = _plain(item, f"{where}.{key}" if where else key, problems, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]", problems, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        problems.add(f"{where}: {value} is not a JSON number")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
        problems.add(f"{where}: integer {describe(value)} is beyond ±(2**53 - 1)")
    elif value is None or isinstance(value, str | int | float):
        return value
    else:
        problems.add(f"{where}: {type(value).__name__} is not a JSON value (quote it)")
    return None


class RulePolicy:
    """An ordered list of rules (first match wins) over the defaults of :func:`default_verdict`."""

    __slots__ = (
        "_cache",
        "_defaults",
        "_rules",
        "approval_ttl",
        "policy_id",
        "rule_ids",
        "version",
    )

    def __init__(self, data: Mapping[str, Any], *, source: str = "<policy>") -> None:
        problems = Problems(f"{source}: ")
        if not isinstance(data, Mapping):
            problems.add(f"policy file: expected a mapping, got {_show(data)}")
            raise problems.error(source, code="policy_invalid")
        plain = _plain(data, "", problems)
        top = _keys(plain, "", problems, ("policy", "approval_ttl", "rules")) or {}
        policy_id = top.get("policy")
        if not isinstance(policy_id, str) or not policy_id:
            problems.add(f"policy: required, a non-empty string; got {_show(policy_id)}")
        ttl = None
        if "approval_ttl" in top:
            ttl = problems.check(_ttl, top["approval_ttl"], "approval_ttl")
        raw_rules = top.get("rules", [])
        if not isinstance(raw_rules, list):
            problems.add(f"rules: expected a list of rules, got {_show(raw_rules)}")
            raw_rules = []
        rules = [_compile(raw, i, ttl, problems) for i, raw in enumerate(raw_rules)]
        first: dict[str, int] = {}
        for i, rule in enumerate(rules):
            if rule is None:
                continue
            if rule.id in first:
                other = f"rules[{first[rule.id]}]"
                problems.add(f"rule {rule.id!r} (rules[{i}]): {other} has this id too")
            first.setdefault(rule.id, i)
        if problems or not isinstance(policy_id, str):
            raise problems.error(source, code="policy_invalid")
        self.policy_id: str = policy_id
        self.version: str = digest(plain)
        self.approval_ttl: float | None = ttl
        self.rule_ids: tuple[str, ...] = tuple(first)
        self._rules = tuple(r for r in rules if r is not None)
        self._cache: dict[tuple[str, str], tuple[_Rule, ...]] = {}
        self._defaults = _defaults(ttl)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<policy>") -> RulePolicy:
        return cls(data, source=source)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<policy>") -> RulePolicy:
        """A policy from YAML text, read by oarlock's one YAML reader (no anchors, aliases
        or merge keys; see :mod:`oarlock._yaml`)."""
        return cls(load_yaml(text, source, code="policy_invalid"), source=source)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> RulePolicy:
        """A policy file, read within the input limit (:mod:`oarlock._input`)."""
        name = os.fspath(path)
        data = read_input(path, what="policy file", code="policy_invalid")
        text = decode_text(data, name, what="policy file", code="policy_invalid")
        return cls.from_yaml(text, source=name)

    def __repr__(self) -> str:
        return f"RulePolicy({self.policy_id!r}, rules={len(self._rules)}, {self.version[:15]}…)"

    def evaluate(self, request: PolicyRequest) -> PolicyVerdict:
        """The verdict of the first matching rule, else the default. Never raises."""
        try:
            verdict = _precheck(request)
            if verdict is not None:
                return verdict
            key = (request.tool, request.side_effect_class)
            rules = self._cache.get(key)
            if rules is None:
                rules = self._candidates(*key)
            scope = request.scope
            if type(scope) is not dict and not isinstance(scope, Mapping):
                scope = {}
            for rule in rules:
                if rule.matches(scope, request.arguments):
                    return rule.standing if needs_approval(request) else rule.verdict
            return _fallback(request, self._defaults)
        except Exception as exc:  # fail closed on anything unforeseen
            why = f"policy evaluation failed: policy {self.policy_id!r}: {type(exc).__name__}"
            return PolicyVerdict("deny", None, (why,))

    def _candidates(self, tool: str, cls: str) -> tuple[_Rule, ...]:
        """The rules whose tool and class filters accept this call, in order (cached)."""
        rules = tuple(
            r
            for r in self._rules
            if (r.tools is None or r.tools(tool)) and (r.classes is None or cls in r.classes)
        )
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[(tool, cls)] = rules
        return rules


DEFAULT_POLICY = RulePolicy.from_dict({"policy": "oarlock-default"}, source="oarlock-default")
