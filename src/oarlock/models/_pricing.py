"""What tokens cost: per model, in USD per million tokens. Users extend the table; a model
with no price is an error when a cost limit is set, and is never silently free."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from oarlock._config import Problems, at, need_mapping, need_number, unknown_keys
from oarlock.errors import ConfigError

__all__ = ["DEFAULT_PRICES", "Price", "PricingTable"]

_PRICE_KEYS = ("input_per_million", "output_per_million", "cached_input_per_million")


@dataclass(frozen=True, slots=True)
class Price:
    input_per_million: float
    output_per_million: float
    cached_input_per_million: float | None = None

    def __post_init__(self) -> None:
        problems = Problems()
        for name in ("input_per_million", "output_per_million", "cached_input_per_million"):
            value = getattr(self, name)
            if value is not None or name != "cached_input_per_million":
                problems.check(need_number, value, name)
        if problems:
            raise problems.error("price")

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        cached_rate = (
            self.cached_input_per_million
            if self.cached_input_per_million is not None
            else self.input_per_million
        )
        fresh = max(input_tokens - cached_tokens, 0)
        return (
            fresh * self.input_per_million
            + cached_tokens * cached_rate
            + output_tokens * self.output_per_million
        ) / 1_000_000


DEFAULT_PRICES: dict[str, Price] = {
    "scripted:*": Price(0.0, 0.0),
    "replay:*": Price(0.0, 0.0),
    "openai:gpt-4.1": Price(2.0, 8.0, 0.5),
    "openai:gpt-4.1-mini": Price(0.4, 1.6, 0.1),
    "openai:gpt-4o": Price(2.5, 10.0, 1.25),
    "openai:gpt-4o-mini": Price(0.15, 0.6, 0.075),
    "anthropic:claude-sonnet-4-5": Price(3.0, 15.0, 0.3),
    "anthropic:claude-opus-4-1": Price(15.0, 75.0, 1.5),
    "anthropic:claude-haiku-4-5": Price(1.0, 5.0, 0.1),
}


class PricingTable:
    """Exact model strings first, then glob patterns (``scripted:*``), user entries first."""

    def __init__(self, extra: Mapping[str, Price] | None = None, *, defaults: bool = True) -> None:
        self._prices: dict[str, Price] = dict(extra or {})
        if defaults:
            for k, v in DEFAULT_PRICES.items():
                self._prices.setdefault(k, v)

    def price(self, model: str) -> Price | None:
        if model in self._prices:
            return self._prices[model]
        for pattern, price in self._prices.items():
            if fnmatch.fnmatchcase(model, pattern):
                return price
        return None

    def require(self, model: str) -> Price:
        price = self.price(model)
        if price is None:
            raise ConfigError(
                f"no price for model {model!r}, and a cost limit is set: add it to the agent's "
                "pricing (USD per million input and output tokens)",
                code="unpriced_model",
            )
        return price

    @staticmethod
    def parse(raw: object, key: str = "pricing") -> dict[str, Price]:
        """Prices from an agent file's ``pricing``: model string (or glob) to
        ``input_per_million``, ``output_per_million`` and optional
        ``cached_input_per_million``, each a finite number of USD ≥ 0. Every problem is
        reported (one ConfigError listing them)."""
        table = need_mapping(raw, key)
        problems = Problems()
        out: dict[str, Price] = {}
        for model, entry in table.items():
            where = at(key, model)
            if not model:
                problems.add(f"{key}: a model string must not be empty")
                continue
            before = len(problems)
            spec = problems.check(need_mapping, entry, where)
            if spec is None:
                continue
            problems.extend(unknown_keys(spec, where, _PRICE_KEYS))
            values: dict[str, float] = {}
            for name in _PRICE_KEYS:
                if name in spec:
                    values[name] = problems.check(need_number, spec[name], at(where, name)) or 0.0
                elif name != "cached_input_per_million":
                    problems.add(f"{at(where, name)}: required (USD per million tokens)")
            if len(problems) == before:
                out[model] = Price(**values)
        if problems:
            raise problems.error(key)
        return out
