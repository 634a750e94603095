"""The algorithm registry (``algorithm.name``); each algorithm registers in its own module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mecsim.common.registry import Registry

if TYPE_CHECKING:
    from mecsim.algorithms.base import Algorithm

ALGORITHMS: Registry[type[Algorithm]] = Registry(
    "algorithm", "algorithm.name", package="mecsim.algorithms"
)
