"""What a scheduling study compares, from the events table: how many clients a round
took, how evenly the clients took part, how hard and how long they transmitted.

* ``clients_per_round`` - the mean of the rounds' ``num_selected``;
* ``participation_jain`` - Jain's fairness index ``(sum x)^2 / (n sum x^2)`` of ``x_i``,
  the rounds client ``i`` took part in (received a model or sent an update), over the
  ``n`` clients that train: 1 when all took part equally, ``1/n`` when one did all;
* ``mean_tx_power_w`` - the clients' transmit energy over their air time;
* ``energy_j_per_client`` - ``energy_j.total`` of ``summary.json`` (idle included)
  over the ``n`` clients;
* ``band_utilization`` - on a finite cell band W (``network.uplink.total_bandwidth_mhz``),
  the band-time the uploads used, ``sum_i b_i d_i`` (each upload's mean band, its
  ``band`` decision, times its air time), over ``W`` times the time any upload was on
  the air: 1 when the band was never idle while someone uploaded (NaN without a cell
  band or band decisions);
* ``upload_phase_s`` - from a round's first upload start to its last upload's end
  (failed ones included), the mean over the rounds with uploads;
* ``updates_per_round`` - the rounds' mean ``updates`` (uploads that reached the server);
* ``mean_pm_acc`` - the personalized accuracy averaged over the evaluated rounds (the
  area under its curve per round: an early lead counts, a last-round dip does not rule).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from mecsim.analysis.compare import RunRecord

SCHEDULING_COLUMNS = (
    "clients_per_round",
    "participation_jain",
    "mean_tx_power_w",
    "energy_j_per_client",
    "band_utilization",
    "upload_phase_s",
    "updates_per_round",
    "mean_pm_acc",
)


def jain_index(x: np.ndarray) -> float:
    """Jain's fairness index of ``x`` (NaN for no entries or all zero)."""
    square_sum = float(np.sum(np.square(x, dtype=float)))
    return float(np.sum(x, dtype=float)) ** 2 / (len(x) * square_sum) if square_sum else math.nan


def band_utilization(
    events: pd.DataFrame, decisions: pd.DataFrame | None, band_hz: float | None
) -> float:
    """The module docstring's ``band_utilization`` of one run."""
    if decisions is None or not band_hz or decisions.empty:
        return math.nan
    bands = decisions[decisions["decision"] == "band"]
    uploads = events[(events["phase"] == "upload") & (events["role"] == "sender")]
    if bands.empty or uploads.empty:
        return math.nan
    # the k-th upload of (round, client) took the k-th band decision of that pair
    uploads = uploads.sort_values("t_start").assign(
        k=lambda f: f.groupby(["round", "client"]).cumcount()
    )
    bands = bands.sort_values("t").assign(k=lambda f: f.groupby(["round", "client"]).cumcount())
    paired = uploads.merge(bands, on=["round", "client", "k"], how="inner")
    used = float((paired["value"] * paired["duration_s"]).sum())
    return used / (band_hz * _union_length(uploads["t_start"], uploads["t_end"]))


def _union_length(starts: pd.Series, ends: pd.Series) -> float:
    """The total length of the union of the intervals [start, end)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(zip(starts.to_numpy(), ends.to_numpy(), strict=True)):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def scheduling_measures(run: RunRecord) -> dict[str, float]:
    """The module docstring's measures of one run (``n``: its clients that train)."""
    events, rounds, summary, settings = run.events, run.rounds, run.summary, run.settings
    trainers = int(settings.get("clients.count", 0) or 0)
    trainers -= int(settings.get("evaluation.new_clients", 0) or 0)
    band_mhz = settings.get("network.uplink.total_bandwidth_mhz")
    rows = events[(events["client"] >= 0) & (events["round"] >= 0)]
    took_part = rows[rows["direction"] != "none"].drop_duplicates(["client", "job"])
    x = took_part["client"].value_counts().reindex(range(trainers), fill_value=0).to_numpy()
    sends = rows[(rows["direction"] == "up") & (rows["role"] == "sender")]
    air_s = float(sends["duration_s"].sum())
    energy = summary.get("energy_j", {})
    total = energy.get("total", math.nan) if isinstance(energy, dict) else math.nan
    return {
        "clients_per_round": float(rounds["num_selected"].mean()) if len(rounds) else math.nan,
        "participation_jain": jain_index(x) if trainers else math.nan,
        "mean_tx_power_w": float(sends["energy_j"].sum()) / air_s if air_s > 0 else math.nan,
        "energy_j_per_client": float(total) / trainers if trainers else math.nan,
        "band_utilization": band_utilization(
            events, run.decisions, float(band_mhz) * 1e6 if band_mhz else None
        ),
        "upload_phase_s": upload_phase(sends),
        "updates_per_round": float(rounds["updates"].mean()) if "updates" in rounds else math.nan,
        "mean_pm_acc": float(rounds["personal_acc"].mean())
        if "personal_acc" in rounds
        else math.nan,
    }


def upload_phase(sends: pd.DataFrame) -> float:
    """The mean over rounds of the first upload's start to the last upload's end."""
    if sends.empty:
        return math.nan
    spans = sends.groupby("round").agg(start=("t_start", "min"), end=("t_end", "max"))
    return float((spans["end"] - spans["start"]).mean())
