"""Replay a run from its directory and compare every figure (``mecsim check-run``).

The tables and summary of a run follow from ``scenario.resolved.toml`` and its seed:
positions and association, every fading draw, interference and band share,
handovers, backhaul rows, faults and the rounds. A replay runs that scenario again,
cost-only where the algorithm's payload does not depend on training (the events
table is then identical, see ``mecsim check``), with training otherwise
(``replay="full"``), and compares each quantity with what the directory holds: the
largest relative error per column, a problem above :data:`RTOL`.

The replay is mecsim's own physics run twice: it catches a table edited after the
run, a run that does not reproduce, and a figure no closed form reaches
(interference, moving clients). That the physics itself is right is what
:mod:`mecsim.analysis.physics` checks with closed forms, and the tests under
``tests/channels`` and ``tests/net`` with independent recomputations.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from mecsim.analysis.invariants import RTOL, Check, check_run_dir
from mecsim.common.errors import MecsimError

Replay = Literal["auto", "full", "off"]
"""``auto``: cost-only where the algorithm allows it (else skipped, with the reason);
``full``: train as the run did (as long as the run); ``off``: no replay."""

UNTIMED = ("acc", "wall", "loss")
"""Figures that depend on training or the host, not on the physics: not compared."""
HOST_KEYS = ("executor", "threads", "calibration", "evaluation_probe", "device", "versions")
"""Summary entries that describe the machine that ran it."""


@dataclass(frozen=True)
class NoReplay:
    """Why a run was not replayed: a skip (nothing to compare with), or a failure (its
    scenario no longer runs)."""

    reason: str
    failed: bool = False

    def check(self) -> Check:
        if self.failed:
            return Check("replay", 1, [self.reason])
        return Check("replay", skipped=self.reason)


def audit_run_dir(run_dir: str | Path, replay: Replay = "auto") -> list[Check]:
    """Every check of :func:`~mecsim.analysis.invariants.check_run_dir`, then the replay's."""
    checks = check_run_dir(run_dir)
    if replay == "off" or any(c.name == "readable" for c in checks):
        return checks
    return checks + replay_checks(run_dir, replay)


def replay_checks(run_dir: str | Path, replay: Replay = "auto") -> list[Check]:
    """Replay the run in ``run_dir`` and compare its tables and summary with the replay's."""
    from mecsim.analysis.compare import load_run

    run = load_run(run_dir)
    scenario = Path(run_dir) / "scenario.resolved.toml"
    if not scenario.is_file():
        return [NoReplay(f"{scenario} is missing: nothing to replay").check()]
    replayed = replay_run(scenario, run.settings, replay)
    clients = pd.read_parquet(Path(run_dir) / "clients.parquet")
    decisions = Path(run_dir) / "decisions.parquet"
    chosen = pd.read_parquet(decisions) if decisions.is_file() else None
    return compare_run(run.events, run.rounds, clients, run.summary, replayed, chosen)


def check_replay(result: Any, replay: Replay = "auto") -> list[Check]:
    """:func:`replay_checks` for a :class:`~mecsim.runs.tables.RunResult` in memory."""
    from mecsim.analysis.compare import flatten

    scenario = result.scenario.model_dump(mode="json")
    replayed = replay_run(scenario, flatten(scenario), replay)
    tables = (result.events, result.rounds, result.clients)
    return compare_run(*tables, result.summary, replayed, result.decisions)


def compare_run(
    events: pd.DataFrame,
    rounds: pd.DataFrame,
    clients: pd.DataFrame,
    summary: dict[str, Any],
    replayed: Any,
    decisions: pd.DataFrame | None = None,
) -> list[Check]:
    """A run's tables and summary against a replay (or the reason there is none);
    its scheduling decisions too, where it wrote them."""
    if isinstance(replayed, NoReplay):
        return [replayed.check()]
    checks = [
        compare_frames("replay events", events, replayed.events),
        compare_frames("replay rounds", rounds, replayed.rounds),
        compare_frames("replay clients", clients, replayed.clients),
        compare_summary(summary, replayed.summary),
    ]
    if decisions is not None and replayed.decisions is not None:
        checks.append(compare_frames("replay decisions", decisions, replayed.decisions))
    return checks


def replay_run(
    scenario: Path | dict[str, Any], settings: dict[str, Any], replay: Replay = "auto"
) -> Any:
    """A run of ``scenario`` (a RunResult; ``settings``: its flattened keys), cost-only
    under ``auto``, or a :class:`NoReplay`."""
    from mecsim.runs.runner import run

    overrides = ["output.progress=false"]
    if replay == "auto":
        why = _needs_training(settings)
        if why:
            return NoReplay(why)
        overrides.append("execution.cost_only=true")
    try:
        with warnings.catch_warnings():  # the run warned when it ran
            warnings.simplefilter("ignore")
            return run(scenario, overrides, write=False, progress=False)
    except MecsimError as error:
        return NoReplay(f"its scenario does not run again: {str(error).splitlines()[0]}", True)


def _needs_training(settings: dict[str, Any]) -> str:
    """Why a cost-only replay cannot reproduce the run ('' if it can)."""
    from mecsim.algorithms.registry import ALGORITHMS
    from mecsim.policies.scheduling import SCHEDULERS

    algorithm = settings.get("algorithm.name")
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        return f"algorithm {algorithm!r} is not registered here (pass its --import)"
    why = ALGORITHMS.get(algorithm).payload_from_training
    if why:
        return f"{algorithm}'s payload depends on training ({why}); --replay full trains"
    policy = settings.get("scheduling.policy", "uniform")
    if not isinstance(policy, str) or policy not in SCHEDULERS:
        return f"scheduling policy {policy!r} is not registered here (pass its --import)"
    if SCHEDULERS.get(policy).uses_training:
        return f"scheduling policy {policy} ranks by training's reports; --replay full trains"
    return ""


def _relative_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| / max(|a|, |b|) per element (0 where equal, NaN and NaN included)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.maximum(np.abs(a), np.abs(b))
        error = np.abs(a - b) / np.where(scale > 0, scale, 1.0)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    return np.where(same, 0.0, np.where(np.isnan(error), np.inf, error))


def compare_frames(name: str, written: pd.DataFrame, replayed: pd.DataFrame) -> Check:
    """Column by column: numbers within :data:`RTOL`, everything else equal."""
    columns = [c for c in replayed if not any(word in c for word in UNTIMED)]
    check = Check(name, len(written) * len(columns))
    missing = [c for c in columns if c not in written]
    if missing:
        check.problems.append(f"{name.split()[-1]} lack {', '.join(missing)}")
        return check
    if len(written) != len(replayed):
        check.problems.append(_first_difference(written, replayed, columns))
        return check
    for column in columns:
        a, b = written[column].to_numpy(), replayed[column].to_numpy()
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            error = _relative_error(a.astype(float), b.astype(float))
            check.worst[column] = float(error.max(initial=0.0))
            wrong = np.flatnonzero(error > RTOL)
        else:
            wrong = np.flatnonzero(a.astype(str) != b.astype(str))
            check.worst[column] = math.inf if len(wrong) else 0.0
        if len(wrong):
            k = wrong[0]
            check.problems.append(
                f"{column}: {len(wrong)} of {len(a)} rows differ; row {k}: {a[k]!r}, "
                f"replayed {b[k]!r}"
            )
    return check


def _first_difference(written: pd.DataFrame, replayed: pd.DataFrame, columns: list[str]) -> str:
    """Where two tables of different lengths part: the first row that differs."""
    n = min(len(written), len(replayed))
    keys = [c for c in ("round", "client", "phase", "t_start") if c in columns] or columns[:3]
    a, b = written[keys].iloc[:n], replayed[keys].iloc[:n]
    differs = ~((a.to_numpy() == b.to_numpy()).all(axis=1))
    k = int(np.argmax(differs)) if differs.any() else n
    row = dict(written[keys].iloc[k]) if k < len(written) else "none"
    again = dict(replayed[keys].iloc[k]) if k < len(replayed) else "none"
    return (
        f"{len(written)} rows, the replay has {len(replayed)}; "
        f"first difference at row {k}: {row}, replayed {again}"
    )


def _leaves(tree: Any, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a summary, by dotted key."""
    if isinstance(tree, dict):
        out: dict[str, float] = {}
        for key, value in tree.items():
            out |= _leaves(value, f"{prefix}{key}.")
        return out
    if isinstance(tree, int | float) and not isinstance(tree, bool):
        return {prefix[:-1]: float(tree)}
    return {}


def compare_summary(written: dict[str, Any], replayed: dict[str, Any]) -> Check:
    """Each numeric figure of ``summary.json`` that follows from the physics."""
    figures = {
        key: value
        for key, value in _leaves(replayed).items()
        if not any(word in key for word in UNTIMED) and not key.startswith(HOST_KEYS)
    }
    reported = _leaves(written)
    check = Check("replay summary", len(figures))
    for key, value in figures.items():
        if key not in reported:
            check.problems.append(f"{key} is missing (the replay gives {value!r})")
            continue
        error = float(_relative_error(np.array([reported[key]]), np.array([value]))[0])
        check.worst[key] = error
        if error > RTOL:
            check.problems.append(f"{key} = {reported[key]!r}, the replay gives {value!r}")
    return check
