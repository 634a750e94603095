"""Small-scale fading: draws of the channel power gain |g|^2.

Each model is a frozen dataclass with ``draw(rng) -> float``; randomness comes
only from the ``np.random.Generator`` passed in (one draw per transmission).
KAPC Table 4 fixes "small-scale fading channel power gain 1", i.e.
``NoFading``, the default. Models are registered in ``FADING`` by name and
selected with the scenario key ``network.fading``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mecsim.common.registry import Registry


class Fading(Protocol):
    """What a fading model implements: one draw of |g|^2 (dimensionless)."""

    def draw(self, rng: np.random.Generator) -> float: ...


FADING: Registry[type] = Registry("fading model", "network.fading")


@FADING.register("none", "No small-scale fading: |g|^2 = 1 (KAPC Table 4 default).")
@dataclass(frozen=True)
class NoFading:
    """No small-scale fading: |g|^2 = 1 always; ``rng`` is not consumed."""

    def draw(self, rng: np.random.Generator) -> float:
        return 1.0


@FADING.register("rayleigh", "Rayleigh fading: |g|^2 ~ Exp(1).")
@dataclass(frozen=True)
class RayleighFading:
    """Rayleigh fading: |g|^2 ~ Exp(1), mean 1."""

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.exponential(1.0))


@FADING.register("rician", "Rician fading with K-factor k_factor, mean 1.")
@dataclass(frozen=True)
class RicianFading:
    """Rician fading: |g|^2 = |sqrt(K/(K+1)) + sqrt(1/(K+1)) CN(0,1)|^2, mean 1.

    Args:
        k_factor: ratio of line-of-sight to scattered power K (>= 0, linear);
            K = 0 is Rayleigh.
    """

    k_factor: float = 3.0

    def __post_init__(self) -> None:
        if self.k_factor < 0:
            raise ValueError(f"k_factor must be >= 0, got {self.k_factor}")

    def draw(self, rng: np.random.Generator) -> float:
        los = np.sqrt(self.k_factor / (self.k_factor + 1.0))
        scatter = np.sqrt(1.0 / (self.k_factor + 1.0))
        re, im = rng.standard_normal(2) * np.sqrt(0.5)  # CN(0, 1)
        return float((los + scatter * re) ** 2 + (scatter * im) ** 2)


@FADING.register("lognormal", "Log-normal shadowing: |g|^2 = 10^(N(0, sigma_db)/10).")
@dataclass(frozen=True)
class LogNormalShadowing:
    """Log-normal shadowing: |g|^2 = 10^(X/10), X ~ N(0, sigma_db) in dB.

    The median is 1 but the mean is not: E|g|^2 = exp((sigma_db ln(10)/10)^2 / 2),
    about 5.4 for sigma_db = 8.

    Args:
        sigma_db: standard deviation of the shadowing, dB (>= 0).
    """

    sigma_db: float = 8.0

    def __post_init__(self) -> None:
        if self.sigma_db < 0:
            raise ValueError(f"sigma_db must be >= 0, got {self.sigma_db}")

    def draw(self, rng: np.random.Generator) -> float:
        return float(10.0 ** (rng.normal(0.0, self.sigma_db) / 10.0))


def make_fading(name: str, *, rician_k: float = 3.0, shadowing_sigma_db: float = 8.0) -> Fading:
    """Build the fading model registered as ``name``, passing it its own parameter.

    Args:
        name: one of ``FADING.names()``; unknown names raise ``UnknownNameError``.
        rician_k: K-factor for ``"rician"`` (linear).
        shadowing_sigma_db: standard deviation for ``"lognormal"``, dB.
    """
    cls = FADING.get(name)
    if cls is RicianFading:
        return RicianFading(k_factor=rician_k)
    if cls is LogNormalShadowing:
        return LogNormalShadowing(sigma_db=shadowing_sigma_db)
    return cls()
