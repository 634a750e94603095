"""mecsim: personalized federated learning over a simulated wireless MEC network.

Python API: ``mecsim.run(scenario, overrides, out=..., device=...)`` returns a
:class:`~mecsim.runner.RunResult` with the events, rounds and clients tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from mecsim.runner import RunResult


def run(*args: Any, **kwargs: Any) -> RunResult:
    """Run a scenario; see :func:`mecsim.runner.run`."""
    from mecsim.runner import run as _run

    return _run(*args, **kwargs)


def load_scenario(*args: Any, **kwargs: Any):
    """Load and validate a scenario; see :func:`mecsim.scenario.load_scenario`."""
    from mecsim.scenario import load_scenario as _load

    return _load(*args, **kwargs)


__all__ = ["__version__", "load_scenario", "run"]
