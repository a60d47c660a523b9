"""The one YAML reader of oarlock: agent files, policy files and model scripts all go
through :func:`load_yaml`.

It reads YAML as JSON-like data (mappings, sequences, strings, numbers, booleans, null)
and refuses, naming the file, the line and the column:

* anchors (``&name``), aliases (``*name``) and merge keys (``<<``): an alias repeats a
  node, so a few hundred bytes of aliases of aliases expand to gigabytes;
* a key given twice in one mapping;
* containers nested deeper than :data:`~oarlock._input.MAX_DEPTH` levels;
* integers of more than 4300 digits;
* dates and timestamps (YAML 1.1 reads ``2024-01-01`` as a date: quote it), and the
  ``!!binary``, ``!!set``, ``!!omap`` and ``!!pairs`` tags (and any unknown tag);
* a lone surrogate (a ``"\\udfff"`` escape), which is not text;
* more than one document.

libyaml parses when it is installed (PyYAML's C extension); the checks above run on its
events, so that they hold for both parsers.
"""

from __future__ import annotations

import io
import re
from typing import Any, NoReturn

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.resolver import Resolver

from oarlock._input import MAX_DEPTH, MAX_INT_BITS, MAX_INT_DIGITS
from oarlock.errors import ConfigError

__all__ = ["load_yaml"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_MERGE = "tag:yaml.org,2002:merge"
_REFUSED_TAGS = ("binary", "set", "omap", "pairs")


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class _StrictComposer(Composer):
    """Builds the node tree from parser events, refusing anchors, aliases and deep nesting
    (the node tree is a tree, never a graph)."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event: Any = self.peek_event()  # type: ignore[attr-defined]
        mark: Any = event.start_mark
        if isinstance(event, AliasEvent):
            raise ComposerError(
                None,
                None,
                f"aliases (*{_short(str(event.anchor))}) are not allowed: write the value out",
                mark,
            )
        if event.anchor is not None:
            raise ComposerError(
                None,
                None,
                f"anchors (&{_short(str(event.anchor))}) are not allowed: write the value out",
                event.start_mark,
            )
        nests = isinstance(event, MappingStartEvent | SequenceStartEvent)
        if nests:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
                )
        try:
            node: Node | None = super().compose_node(parent, index)
        finally:
            if nests:
                self._depth -= 1
        if node is None:  # pragma: no cover - the parser gives a node event here
            raise ComposerError(None, None, "expected a value", event.start_mark)
        return node


def _refuse(node: Node, problem: str) -> ConstructorError:
    return ConstructorError(None, None, problem, node.start_mark)


class _StrictConstructor(SafeConstructor):
    def construct_scalar(self, node: ScalarNode) -> Any:  # type: ignore[override]
        value = super().construct_scalar(node)
        found = _SURROGATE.search(value) if isinstance(value, str) else None
        if found is not None:
            cp = ord(found.group(0))
            raise _refuse(node, f"invalid text: a lone surrogate (\\u{cp:04x}) is not a character")
        return value

    def flatten_mapping(self, node: MappingNode) -> None:
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                raise _refuse(key_node, "merge keys (<<) are not allowed: write the keys out")
        super().flatten_mapping(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):
            raise _refuse(node, f"expected a mapping, but found {node.id}")
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                problem = "a key must be a string or a number, not a collection"
                raise _refuse(key_node, problem) from None
            if key in mapping:
                shown = _short(key) if isinstance(key, str) else key
                raise _refuse(key_node, f"duplicate key {shown!r}")
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        digits = text.replace("_", "").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            raise _refuse(node, f"an integer of {len(digits)} digits is too large")
        try:
            value = super().construct_yaml_int(node)
        except (ValueError, IndexError):
            raise _refuse(node, f"{_short(text)!r} is not an integer") from None
        if not isinstance(value, int) or value.bit_length() > MAX_INT_BITS:
            raise _refuse(node, f"the integer {_short(text)} is too large")
        return value

    def construct_yaml_float(self, node: ScalarNode) -> float:
        try:
            return float(super().construct_yaml_float(node))
        except (ValueError, IndexError, OverflowError):
            text = str(self.construct_scalar(node))
            raise _refuse(node, f"{_short(text)!r} is not a number") from None

    def construct_yaml_bool(self, node: ScalarNode) -> bool:
        try:
            return bool(super().construct_yaml_bool(node))
        except KeyError:
            text = str(self.construct_scalar(node))
            raise _refuse(node, f"{_short(text)!r} is not true or false") from None

    def refuse_timestamp(self, node: Node) -> NoReturn:
        raise _refuse(
            node, "YAML reads this as a date or time, which is not a JSON value: quote it"
        )

    def refuse_tag(self, node: Node) -> NoReturn:
        tag = node.tag.removeprefix("tag:yaml.org,2002:")
        raise _refuse(node, f"the !!{tag} tag is not supported: use plain values")


_CONSTRUCTORS: dict[str | None, Any] = {
    "tag:yaml.org,2002:int": _StrictConstructor.construct_yaml_int,
    "tag:yaml.org,2002:float": _StrictConstructor.construct_yaml_float,
    "tag:yaml.org,2002:bool": _StrictConstructor.construct_yaml_bool,
    "tag:yaml.org,2002:timestamp": _StrictConstructor.refuse_timestamp,
    **{f"tag:yaml.org,2002:{t}": _StrictConstructor.refuse_tag for t in _REFUSED_TAGS},
}
_StrictConstructor.yaml_constructors = {**SafeConstructor.yaml_constructors, **_CONSTRUCTORS}


try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(_StrictComposer, Reader, Scanner, Parser, _StrictConstructor, Resolver):
        def __init__(self, stream: Any) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _StrictComposer.__init__(self)
            _StrictConstructor.__init__(self)
            Resolver.__init__(self)

else:

    class _Loader(_StrictComposer, CParser, _StrictConstructor, Resolver):  # type: ignore[no-redef]
        """libyaml's parser, with the composing and constructing above (the Python
        composer methods come before CParser's in the method order)."""

        def __init__(self, stream: Any) -> None:
            CParser.__init__(self, stream)
            _StrictComposer.__init__(self)
            _StrictConstructor.__init__(self)
            Resolver.__init__(self)


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _message(exc: yaml.YAMLError, source: str) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "not valid YAML"
        if exc.context and exc.problem:
            context = exc.context
            if exc.context_mark is not None and exc.context_mark is not mark:
                context += f" at {_where(exc.context_mark)}"
            problem += f" ({context})"
        if not isinstance(exc, ComposerError | ConstructorError):
            problem = f"not valid YAML: {problem}"
        return f"{source}: {_where(mark)}: {problem}" if mark else f"{source}: {problem}"
    if isinstance(exc, yaml.reader.ReaderError):
        return f"{source}: not valid YAML: {exc.reason} at byte {exc.position}"
    return f"{source}: not valid YAML: {exc}"


def load_yaml(text: str, source: str, *, code: str = "config_invalid") -> Any:
    """The data of one YAML document (see the module documentation); a ConfigError with
    ``code``, naming ``source``, the line and the column, for anything refused."""
    stream = io.StringIO(text)
    stream.name = source
    loader = _Loader(stream)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(_message(exc, source), code=code) from None
    finally:
        loader.dispose()
