"""What a run's ``decisions`` table implies for its other tables.

* each upload went out at the power its ``power`` decision names (at the upload's
  start), or, without one, at its client's maximum (``tx_power_dbm``);
* ``power limits``: no power decision exceeds its client's maximum or is negative;
* ``band limits``: no band decision exceeds the cell's band, and the uploads' band-time
  stays within the cell's band x the time any was on the air.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mecsim.analysis.invariants import RTOL, Check, _first, watts


def _maxima(clients: pd.DataFrame) -> pd.Series:
    """Each client's maximum transmit power, W (``tx_power_dbm``), by client."""
    dbm = clients.set_index("client")["tx_power_dbm"]
    return pd.Series(watts(dbm.to_numpy()), index=dbm.index)


def _of_kind(decisions: pd.DataFrame | None, kind: str) -> pd.DataFrame | None:
    """The decisions of ``kind`` (``power``, ``band``); None without a decisions table."""
    if decisions is None or "decision" not in decisions:
        return None
    return decisions[decisions["decision"] == kind]


def upload_powers(
    events: pd.DataFrame, clients: pd.DataFrame, decisions: pd.DataFrame | None
) -> np.ndarray:
    """Per events row: the transmit power of an upload (W; NaN for other rows)."""
    uploading = (
        (events["direction"] == "up") & (events["role"] == "sender") & (events["client"] >= 0)
    ).to_numpy()
    power = np.full(len(events), np.nan)
    power[uploading] = _maxima(clients).reindex(events.loc[uploading, "client"]).to_numpy()
    chosen = _of_kind(decisions, "power")
    if chosen is None or chosen.empty:
        return power
    by_start = chosen.drop_duplicates(["client", "t"], keep="last").set_index(["client", "t"])
    keys = pd.MultiIndex.from_arrays(
        [events.loc[uploading, "client"], events.loc[uploading, "t_start"]]
    )
    decided = by_start["value"].reindex(keys).to_numpy(dtype=float)
    power[uploading] = np.where(np.isnan(decided), power[uploading], decided)
    return power


def power_limits(decisions: pd.DataFrame | None, clients: pd.DataFrame) -> Check:
    """No upload's power above its client's maximum, none negative."""
    check = Check("power limits")
    chosen = _of_kind(decisions, "power")
    if chosen is None:
        check.skipped = "no decisions table"
        return check
    if chosen.empty:
        check.skipped = "every upload at its client's maximum (network.uplink.power = fixed)"
        return check
    limit = _maxima(clients).reindex(chosen["client"]).to_numpy()
    value = chosen["value"].to_numpy(dtype=float)
    bad = (value < 0) | (value > limit * (1 + RTOL)) | np.isnan(value)
    check.examined = len(chosen)
    check.problems = _first(
        chosen[bad].assign(limit=limit[bad]),
        lambda r: f"client {r.client} at t={r.t:.9g}: {r.value:.9g} W, its maximum {r.limit:.9g} W",
    )
    return check


def band_limits(
    events: pd.DataFrame, decisions: pd.DataFrame | None, settings: dict | None
) -> Check:
    """Under an allocation policy no upload's band exceeds the cell's band ``W``, and the
    band-time the uploads used sums to at most ``W`` x the time any was on the air (an
    integral of ``sum_i b_i(t) <= W``): nothing creates bandwidth."""
    check = Check("band limits")
    chosen = _of_kind(decisions, "band")
    total = (settings or {}).get("network.uplink.total_bandwidth_mhz")
    if chosen is None or chosen.empty or total is None:
        check.skipped = "no band decisions (network.uplink.allocation = fcfs)"
        return check
    cell_hz = float(total) * 1e6
    uploads = events[(events["direction"] == "up") & (events["role"] == "sender")]
    uploads = uploads.set_index(["client", "t_start"])[["t_end", "duration_s"]]
    rows = chosen.join(uploads, on=["client", "t"], how="left")
    check.examined = len(rows)
    wide = rows[(rows["value"] > cell_hz * (1 + RTOL)) | rows["t_end"].isna()]
    check.problems = _first(
        wide,
        lambda r: (
            f"client {r.client} at t={r.t:.9g}: {r.value:.9g} Hz of a {cell_hz:.9g} Hz band"
            if not pd.isna(r.t_end)
            else f"client {r.client} at t={r.t:.9g}: a band decision of no upload"
        ),
    )
    used = float((rows["value"] * rows["duration_s"]).sum())
    start, end = np.sort(rows["t"].to_numpy()), rows["t_end"].to_numpy()
    order = np.argsort(rows["t"].to_numpy(), kind="stable")
    reach, busy = -np.inf, 0.0
    for a, b in zip(start, end[order], strict=True):  # the union of the uploads' intervals
        busy += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    if used > cell_hz * busy * (1 + RTOL) + 1e-6:
        check.problems.append(
            f"uploads used {used:.9g} Hz s of band, more than {cell_hz:.9g} Hz x "
            f"{busy:.9g} s on the air"
        )
    changes = _of_kind(decisions, "band_change")
    if changes is not None and not changes.empty:
        at, peak = band_peak(changes, uploads.reset_index())
        if peak > cell_hz * (1 + RTOL):
            check.problems.append(f"at t={at:.9g} the uploads held {peak:.9g} Hz of {cell_hz:.9g}")
    return check


def band_peak(changes: pd.DataFrame, uploads: pd.DataFrame) -> tuple[float, float]:
    """The instant the uploads held the most band, and that band (Hz): each ``band_change``
    row holds its band from its ``t`` until the upload's next change or its end (the
    ``uploads`` row of that client that started last at or before ``t``)."""
    changes = changes.sort_values("t", kind="stable")
    starts = uploads[["client", "t_start", "t_end"]].sort_values("t_start")
    pieces = pd.merge_asof(
        changes, starts, left_on="t", right_on="t_start", by="client", direction="backward"
    )
    upload = pieces.groupby(["client", "t_start"], sort=False).cumcount(ascending=False) == 0
    following = pieces.groupby(["client", "t_start"], sort=False)["t"].shift(-1)
    until = np.where(upload, pieces["t_end"], following)
    # a sweep over the pieces' ends (first at a tie) and starts
    times = np.concatenate([until, pieces["t"].to_numpy()])
    deltas = np.concatenate([-pieces["value"].to_numpy(), pieces["value"].to_numpy()])
    order = np.lexsort((deltas > 0, times))
    held = np.cumsum(deltas[order])
    top = int(np.argmax(held))
    return float(times[order][top]), float(held[top])
