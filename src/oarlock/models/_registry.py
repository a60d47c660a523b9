"""Model strings: which adapter a string names.

=====================================  =============================================
``scripted:PATH``                      a script file (relative to the agent file)
``openai:MODEL``                       OpenAI; ``OPENAI_API_KEY``
``openai-compatible:MODEL@BASE_URL``   any OpenAI-compatible server (vLLM, Ollama, LM
                                       Studio, OpenRouter); key optional
                                       (``OPENAI_COMPATIBLE_API_KEY``)
``anthropic:MODEL``                    Anthropic Messages; ``ANTHROPIC_API_KEY``
=====================================  =============================================

``options`` (an agent file's ``model_options``) are passed to the adapter: for OpenAI
``api`` (``chat`` or ``responses``), ``base_url``, ``timeout``, ``max_output_tokens``; for
Anthropic ``base_url``, ``timeout``, ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oarlock.errors import ConfigError
from oarlock.models._base import ModelAdapter

__all__ = ["load_model"]

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
    if provider == "scripted":
        from oarlock.models._scripted import ScriptedModel

        path = Path(rest)
        return ScriptedModel.from_file(path if path.is_absolute() else base / path)
    if provider == "anthropic":
        from oarlock.models._anthropic import AnthropicModel

        return AnthropicModel(rest, **opts)
    from oarlock.models._openai import OpenAIModel

    if provider == "openai":
        return OpenAIModel(rest, **opts)
    model, at, url = rest.rpartition("@")
    if not at or not model or not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{spec!r}: an OpenAI-compatible model is openai-compatible:MODEL@BASE_URL, e.g. "
            "openai-compatible:qwen2.5@http://127.0.0.1:11434/v1"
        )
    return OpenAIModel(model, base_url=url, provider="openai-compatible", **opts)
