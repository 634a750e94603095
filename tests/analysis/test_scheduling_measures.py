"""The scheduling section's measures (``analysis/scheduling.py``) recomputed by hand
from one run's events, rounds and summary, each with a loop of its own."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mecsim
from mecsim.analysis.compare import load_run
from mecsim.analysis.scheduling import scheduling_measures


def test_each_measure_is_its_hand_computation(tiny, tmp_path):
    overrides = ["output.progress=false", "protocol.rounds=3", "clients.count=6",
                 "protocol.clients_per_round=3", "network.fading=rayleigh"]  # fmt: skip
    mecsim.run(tiny, overrides, out=tmp_path / "run")
    run = load_run(tmp_path / "run")
    got = scheduling_measures(run)
    events, rounds = run.events, run.rounds

    taken = {c: set() for c in range(6)}
    phases, power_num, power_den = {}, 0.0, 0.0
    for row in events.itertuples():
        if row.client < 0 or row.round < 0:
            continue
        if row.direction != "none":
            taken[row.client].add(row.job if not math.isnan(row.job) else row.round)
        if row.direction == "up" and row.role == "sender":
            first, last = phases.get(row.round, (math.inf, -math.inf))
            phases[row.round] = (min(first, row.t_start), max(last, row.t_end))
            power_num += row.energy_j
            power_den += row.duration_s
    x = np.array([len(taken[c]) for c in range(6)], dtype=float)
    assert got["participation_jain"] == pytest.approx(x.sum() ** 2 / (6 * (x**2).sum()))
    assert got["clients_per_round"] == pytest.approx(np.mean(rounds["num_selected"]))
    assert got["mean_tx_power_w"] == pytest.approx(power_num / power_den)
    assert got["energy_j_per_client"] == pytest.approx(run.summary["energy_j"]["total"] / 6)
    spans = [last - first for first, last in phases.values()]
    assert got["upload_phase_s"] == pytest.approx(sum(spans) / len(spans))
    assert got["updates_per_round"] == pytest.approx(rounds["updates"].sum() / len(rounds))
    evaluated = [a for a in rounds["personal_acc"] if not math.isnan(a)]
    assert got["mean_pm_acc"] == pytest.approx(sum(evaluated) / len(evaluated))
