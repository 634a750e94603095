"""mecsim: personalized federated learning over a simulated wireless MEC network.

Python API: ``mecsim.run(scenario, overrides, out=..., device=...)`` returns a
:class:`~mecsim.runner.RunResult` with the events, rounds and clients tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from pathlib import Path

    from mecsim.runner import RunResult
    from mecsim.scenario import Scenario


def run(
    scenario: str | Path | dict[str, Any] | Scenario,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    out: str | Path | None = None,
    device: str | None = None,
    executor: str | None = None,
    write: bool = True,
    progress: bool | None = None,
    resume: bool = False,
) -> RunResult:
    """Run a scenario end to end (what ``mecsim run`` does).

    Args:
        scenario: a TOML path, a mapping, or a :class:`~mecsim.scenario.Scenario`.
        overrides: dotted ``key=value`` strings (or a mapping) applied before validation,
            e.g. ``["protocol.rounds=5", "algorithm.name=ditto"]``.
        out: run directory; default ``<output.dir>/<name>-seed<seed>`` (suffixed if taken).
        device: ``cpu`` (default) or ``cuda`` for the real training.
        executor: client-job backend (``auto``, ``serial``, ``batched``, ``ray``); default
            ``execution.executor``.
        write: write the run directory (False: only return the tables).
        progress: show a progress bar (default: ``output.progress``).
        resume: continue an interrupted run into the same directory from its checkpoint.

    Returns:
        A :class:`~mecsim.runner.RunResult`: ``events``, ``rounds`` and ``clients``
        (pandas DataFrames), ``summary`` (as in ``summary.json``), ``run_dir``.

    Raises:
        mecsim.errors.MecsimError: bad input, named by its field, before any work.
    """
    from mecsim.runner import run as _run

    return _run(
        scenario,
        overrides,
        out=out,
        device=device,
        executor=executor,
        write=write,
        progress=progress,
        resume=resume,
    )


def load_scenario(*args: Any, **kwargs: Any):
    """Load and validate a scenario; see :func:`mecsim.scenario.load_scenario`."""
    from mecsim.scenario import load_scenario as _load

    return _load(*args, **kwargs)


__all__ = ["__version__", "load_scenario", "run"]
