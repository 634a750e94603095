"""mecsim: personalized federated learning over a simulated wireless MEC network.

Python API: ``mecsim.run(scenario, overrides, out=..., device=...)`` returns a
:class:`~mecsim.runner.RunResult` with the events, rounds and clients tables;
``mecsim.load(run_dir)`` reads one back; ``mecsim.compare(run_dirs)`` and
``mecsim.sweep(scenario, {key: values}, out)`` return comparison tables
(:mod:`mecsim.api`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from mecsim.api import compare, load, sweep
    from mecsim.runner import run
    from mecsim.scenario import load_scenario

_LAZY = {
    "run": "mecsim.runner",
    "load_scenario": "mecsim.scenario",
    "load": "mecsim.api",
    "compare": "mecsim.api",
    "sweep": "mecsim.api",
}
"""Public functions and the module defining each: imported on first use, so that
``import mecsim`` (the CLI's first import, plug-ins) does not import torch."""


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'mecsim' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


__all__ = ["__version__", "compare", "load", "load_scenario", "run", "sweep"]
