"""Per-client attribute values: a constant or a distribution, sampled from a named stream.

In a scenario a per-client attribute is either a number (or a name, for
devices) or an inline table with a ``dist`` key::

    bandwidth_mhz = { dist = "uniform", low = 10, high = 30 }
    tx_power_dbm  = 26
    device        = { dist = "choice", values = ["phone-mid", "phone-high"], weights = [3, 1] }
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class Uniform(_Dist):
    """Uniform on [low, high]."""

    dist: Literal["uniform"] = "uniform"
    low: float
    high: float

    @model_validator(mode="after")
    def _check(self) -> Uniform:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size)


class Normal(_Dist):
    """Normal with mean and standard deviation ``std`` (>= 0)."""

    dist: Literal["normal"] = "normal"
    mean: float
    std: float = Field(ge=0)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.normal(self.mean, self.std, size)


class LogNormal(_Dist):
    """exp(N(mu, sigma)): always positive."""

    dist: Literal["lognormal"] = "lognormal"
    mu: float = 0.0
    sigma: float = Field(default=1.0, ge=0)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.lognormal(self.mu, self.sigma, size)


class Choice(_Dist):
    """One of ``values``, with optional non-negative ``weights`` (normalized)."""

    dist: Literal["choice"] = "choice"
    values: list[float | str] = Field(min_length=1)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _check(self) -> Choice:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(
                    f"weights has {len(self.weights)} entries but values has {len(self.values)}"
                )
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        return self

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        p = None
        if self.weights is not None:
            p = np.asarray(self.weights, dtype=float) / sum(self.weights)
        picks = rng.choice(len(self.values), size=size, p=p)
        return np.array([self.values[i] for i in picks], dtype=object)


class NumberChoice(Choice):
    """``choice`` of a numeric attribute: every value is a number."""

    values: list[float] = Field(min_length=1)


Distribution = Annotated[Uniform | Normal | LogNormal | NumberChoice, Field(discriminator="dist")]


def _attribute_kind(value: object) -> str:
    return "distribution" if isinstance(value, (dict, _Dist)) else "constant"


# A tagged union: a table is validated only as a distribution and anything else
# only as a constant, so errors name the one branch the user meant.
NumberAttr = Annotated[
    Annotated[float, Tag("constant")] | Annotated[Distribution, Tag("distribution")],
    Discriminator(_attribute_kind),
]
NameAttr = Annotated[
    Annotated[str, Tag("constant")] | Annotated[Choice, Tag("distribution")],
    Discriminator(_attribute_kind),
]


def sample_attribute(value: float | str | _Dist, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` draws of a per-client attribute (a constant is repeated)."""
    if isinstance(value, _Dist):
        return value.sample(rng, size)
    return np.full(size, value, dtype=object if isinstance(value, str) else float)


def attribute_values(value: float | str | _Dist) -> list[float | str] | None:
    """The finite set of values an attribute can take, or None for continuous ones."""
    if isinstance(value, Choice):
        return list(value.values)
    if isinstance(value, (str, int, float)):
        return [value]
    return None
