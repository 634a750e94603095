"""Shared fixtures: a tiny scenario that runs in about a second."""

from __future__ import annotations

import copy
from typing import Any

import pytest

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "data": {"dataset": "digits", "partition": "dirichlet", "alpha": 1.0},
    "model": {"name": "cnn-small"},
    "algorithm": {"name": "fedavg", "steps": 3, "batch_size": 16, "lr": 0.05},
    "protocol": {"rounds": 2},
    "clients": {"count": 4},
    "output": {"progress": False},
}


@pytest.fixture
def tiny() -> dict[str, Any]:
    """A fresh copy of the tiny scenario mapping (4 clients, 2 rounds, 3 steps)."""
    return copy.deepcopy(TINY)


@pytest.fixture(scope="module")
def tiny_module() -> dict[str, Any]:
    """The tiny scenario for module-scoped fixtures."""
    return copy.deepcopy(TINY)
