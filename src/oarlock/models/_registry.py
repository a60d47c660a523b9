"""Model strings: which adapter a string names.

=====================================  =============================================
``scripted:PATH``                      a script file (relative to the agent file, or
                                       absolute)
``openai:MODEL``                       OpenAI; ``OPENAI_API_KEY``
``openai-compatible:MODEL@BASE_URL``   any OpenAI-compatible server (vLLM, Ollama, LM
                                       Studio, OpenRouter); key optional
                                       (``OPENAI_COMPATIBLE_API_KEY``)
``anthropic:MODEL``                    Anthropic Messages; ``ANTHROPIC_API_KEY``
=====================================  =============================================

``options`` (an agent file's ``model_options``) are passed to the adapter: for OpenAI
``api`` (``chat`` or ``responses``), ``base_url``, ``timeout``, ``max_output_tokens``; for
Anthropic ``base_url``, ``timeout``, ``max_tokens``; ``api_key`` for both (registered as a
secret: it is redacted from every error stored or shown).

A script named by a relative path is the model ``scripted:STEM`` (its file name without
``.yaml`` and ``.script``); one named by an absolute path is ``scripted:/that/path``, a
model string that any process, started anywhere, reads the same script from
(``oarlock run --model scripted:PATH`` names its script that way).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oarlock._secrets import register_secret, register_url
from oarlock.errors import ConfigError
from oarlock.models._base import ModelAdapter

__all__ = ["load_model", "model_for", "scripted_path"]

_OPTIONS = {
    "openai": {"api", "base_url", "timeout", "max_output_tokens", "api_key"},
    "openai-compatible": {"api", "timeout", "max_output_tokens", "api_key"},
    "anthropic": {"base_url", "timeout", "max_tokens", "api_key"},
    "scripted": set(),
}


def load_model(spec: str, base: Path, options: Mapping[str, Any] | None = None) -> ModelAdapter:
    """The adapter a model string names (paths relative to ``base``)."""
    provider, sep, rest = spec.partition(":")
    if not sep or not rest or provider not in _OPTIONS:
        raise ConfigError(
            f"unknown model {spec!r}: use scripted:PATH, openai:MODEL, anthropic:MODEL or "
            "openai-compatible:MODEL@BASE_URL"
        )
    opts = dict(options or {})
    unknown = sorted(set(opts) - _OPTIONS[provider])
    if unknown:
        allowed = ", ".join(sorted(_OPTIONS[provider])) or "none"
        raise ConfigError(
            f"model_options: {unknown[0]!r} does not apply to {provider} (allowed: {allowed})"
        )
    register_secret(opts.get("api_key"))
    register_url(opts.get("base_url"))
    if provider == "scripted":
        from oarlock.models._scripted import ScriptedModel

        path = Path(rest)
        if not path.is_absolute():
            return ScriptedModel.from_file(base / path)
        script = ScriptedModel.from_file(path)
        return ScriptedModel(script.turns, name=str(path))
    if provider == "anthropic":
        from oarlock.models._anthropic import AnthropicModel

        return AnthropicModel(rest, **opts)
    from oarlock.models._openai import OpenAIModel

    if provider == "openai":
        return OpenAIModel(rest, **opts)
    model, at, url = _model_at(rest)
    if not at or not model or not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{spec!r}: an OpenAI-compatible model is openai-compatible:MODEL@BASE_URL, e.g. "
            "openai-compatible:qwen2.5@http://127.0.0.1:11434/v1"
        )
    return OpenAIModel(model, base_url=url, provider="openai-compatible", **opts)


def model_for(spec: str, /, **options: Any) -> ModelAdapter:
    """The adapter a model string names, as an agent file would make it: ``openai:gpt-4.1``,
    ``anthropic:claude-sonnet-4-5``, ``openai-compatible:MODEL@URL``, ``scripted:PATH``
    (relative to the working folder). ``options`` are the adapter's (``api_key``,
    ``base_url``, ``timeout``...). A ConfigError names what is wrong, or the extra to
    install (``pip install 'oarlock[openai]'``) when the provider's SDK is missing."""
    if not isinstance(spec, str):
        raise ConfigError(f"a model is a model string or an adapter, not {type(spec).__name__}")
    return load_model(spec, Path.cwd(), options)


def _model_at(rest: str) -> tuple[str, str, str]:
    """``MODEL@BASE_URL`` split at the ``@`` before the URL (a URL may have its own
    ``user:password@``)."""
    for scheme in ("@http://", "@https://"):
        index = rest.find(scheme)
        if index >= 0:
            return rest[:index], "@", rest[index + 1 :]
    return rest.rpartition("@")


def scripted_path(spec: str, cwd: Path) -> str:
    """``spec`` with a relative ``scripted:PATH`` made absolute from ``cwd`` (where the
    command was given); any other model string as it is."""
    provider, sep, rest = spec.partition(":")
    if provider != "scripted" or not sep or not rest or Path(rest).is_absolute():
        return spec
    return f"scripted:{(cwd / rest).resolve()}"
