"""Model adapters: the protocol, model strings, the scripted, function and replay models, the
provider adapters (loaded on first use: importing oarlock imports no provider SDK), and
pricing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oarlock._lazy import lazy_exports
from oarlock.models._base import ModelAdapter, ModelRequest, ModelResponse
from oarlock.models._function import FunctionModel
from oarlock.models._pricing import DEFAULT_PRICES, Price, PricingTable
from oarlock.models._registry import model_for
from oarlock.models._replay import Divergence, ReplayModel
from oarlock.models._scripted import ScriptedModel

if TYPE_CHECKING:
    from oarlock.models._anthropic import AnthropicModel
    from oarlock.models._openai import OpenAIModel

__all__ = [
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

__getattr__, __dir__ = lazy_exports(
    __name__, {"AnthropicModel": "_anthropic", "OpenAIModel": "_openai"}, globals()
)
