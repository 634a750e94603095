"""mecsim: personalized federated learning over a simulated wireless MEC network.

Python API: ``mecsim.run(scenario, overrides, out=..., device=...)`` returns a
:class:`~mecsim.runs.runner.RunResult` with the events, rounds and clients tables;
``mecsim.load(run_dir)`` reads one back; ``mecsim.compare(run_dirs)`` and
``mecsim.sweep(scenario, {key: values}, out)`` return comparison tables
(:mod:`mecsim.commands.api`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mecsim.common import moved

__version__ = "0.1.0"

moved.install()  # the flat 0.1 module paths (``mecsim.state``, ...) still import

if TYPE_CHECKING:
    from mecsim.commands.api import compare, load, sweep
    from mecsim.config.scenario import load_scenario
    from mecsim.runs.runner import run

_LAZY = {
    "run": "mecsim.runs.runner",
    "load_scenario": "mecsim.config.scenario",
    "load": "mecsim.commands.api",
    "compare": "mecsim.commands.api",
    "sweep": "mecsim.commands.api",
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
