"""``python -m oarlock.sandbox._child``: one sandboxed call of a Python tool, inside the
sandbox.

Standard input holds one JSON object: the tool's module and qualified name, the private
packages of agent-file folders to recreate (name to folder), and the arguments. The tool's
arguments are validated again here (its own model gives them their Python types); its own
prints go to standard error; standard output receives one JSON object, the outcome:
``{"ok": true, "text": ...}`` or ``{"ok": false, "error": TYPE, "message": ...}``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys
from typing import Any


def _package(name: str, folder: str) -> None:
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [folder]
    sys.modules[name] = importlib.util.module_from_spec(spec)


def _resolve(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _call(target: Any, arguments: dict[str, Any]) -> Any:
    from oarlock.tools._tool import Tool, ToolOutput, result_text

    if isinstance(target, Tool):
        fn, arguments = target.fn, target.validate_arguments(arguments)
    else:
        fn = target
    value = fn(**arguments)
    if inspect.isawaitable(value):
        value = asyncio.run(_await(value))
    if isinstance(value, ToolOutput):
        value = value.value
    return result_text(value)


async def _await(value: Any) -> Any:
    return await value


def main() -> int:
    out = os.dup(1)
    os.dup2(2, 1)  # the tool's own prints go to standard error
    try:
        spec = json.loads(sys.stdin.buffer.read())
        for name, folder in (spec.get("packages") or {}).items():
            _package(name, folder)
        for entry in reversed(spec.get("path") or []):
            sys.path.insert(0, entry)
        text = _call(_resolve(spec["module"], spec["qualname"]), spec["arguments"])
        outcome: dict[str, Any] = {"ok": True, "text": text}
    except BaseException as exc:  # the outcome of any failure is reported, not raised
        outcome = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:4000]}
    data = json.dumps(outcome, ensure_ascii=True).encode()
    while data:
        data = data[os.write(out, data) :]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
