"""Model adapters: the protocol, the scripted and replay models, and pricing."""

from oarlock.models._base import ModelAdapter, ModelRequest, ModelResponse
from oarlock.models._pricing import DEFAULT_PRICES, Price, PricingTable
from oarlock.models._replay import Divergence, ReplayModel
from oarlock.models._scripted import ScriptedModel

__all__ = [
    "DEFAULT_PRICES",
    "Divergence",
    "ModelAdapter",
    "ModelRequest",
    "ModelResponse",
    "Price",
    "PricingTable",
    "ReplayModel",
    "ScriptedModel",
]
