"""The physics a run's tables imply, recomputed with closed forms and no simulator code.

:mod:`mecsim.analysis.invariants` checks the ledger's arithmetic (power x time, bytes,
sums); these checks recompute what the physics says each figure must be, from the
tables and the run's settings alone:

* ``compute time``: a computation lasts its FLOPs / the device's FLOP/s (a client's
  device from the clients table, the server's or an edge server's from its name); a
  computation cut off by the run's end or a dropout did at most the FLOPs of the time
  it ran;
* ``transfer rate``: a transfer's bits are its effective rate x its air time, and no
  rate beats Shannon's bound ``B log2(1 + SINR)`` on the widest band the link has at
  the SINR it recorded (a time average of a concave function stays below the function
  of the average);
* ``link budget``: in a run whose links are constant (one cell, clients that do not
  move, no fading, each uplink on its own band), each upload's SNR is
  ``P g(d) / (N0 B)`` with the log-distance gain ``g``, and a broadcast receiver's is
  the server's power over its distance on the downlink band;
* ``promptness``: a client computes as soon as its download ends and uploads as
  soon as its computation ends (or waits for spectrum, a row of its own): nothing
  delays a client but what the table shows;
* ``idle energy``: each client's waiting time in the rounds it took part in (from its
  first activity to the round's end, less the union of its download, compute and
  upload intervals), at its device's idle power, is ``energy_j.client_idle``; the
  total is the rows' energy plus that;
* ``run times``: ``sim_time_s`` is the end of the last round (its end in the rounds
  table or its last row, a backhaul transfer or late training, whichever is later; the
  new clients' join after it not included), ``mean_round_s`` the mean round length;
* ``handover breaks``: a handover sends nothing and draws nothing for exactly
  ``network.handover_interruption_s`` (at most that when the run's end cuts it off).

What none of these can recompute (interference, fading draws, moving positions,
handovers) the replay recomputes (:mod:`mecsim.runs.replay`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from mecsim.analysis.costs import BUSY
from mecsim.analysis.invariants import RTOL, Check, RunFacts, _clock_tol, _close, _first, watts


def compute_time(events: pd.DataFrame, clients: pd.DataFrame, facts: RunFacts) -> Check:
    """Each computation's duration from its FLOPs and its device's FLOP/s."""
    check = Check("compute time")
    if "device_flops_per_s" not in clients:
        check.skipped = "the clients table has no device_flops_per_s (an older run)"
        return check
    rate = _device_flops(events, clients, facts)
    known = ~np.isnan(rate)
    flops = events["flops"].to_numpy(dtype=float)
    seconds = events["duration_s"].to_numpy(dtype=float)
    at_rate = flops / np.where(known, rate, 1.0)
    cut = events["phase"].str.endswith(":cutoff").to_numpy()
    tol = _clock_tol(events)
    whole = known & ~cut & ~_close(seconds, at_rate, tol)
    # a cut computation did the whole FLOPs of the time it ran, rounded down
    part = known & cut & ((at_rate > seconds + tol) | ((flops + 1) / rate < seconds - tol))
    bad = whole | part
    check.examined = int(known.sum())
    check.problems = _first(
        events[bad].assign(expected=at_rate[bad]),
        lambda r: (
            f"{r.phase} of client {r.client} at t={r.t_start:.9g}: {r.duration_s:.12g} s "
            f"for {r.flops} FLOPs, the device takes {r.expected:.12g} s"
        ),
    )
    return check


def _device_flops(events: pd.DataFrame, clients: pd.DataFrame, facts: RunFacts) -> np.ndarray:
    """Each computing row's device FLOP/s (NaN: not a computation, or a device unknown)."""
    rate = np.full(len(events), np.nan)
    client = events["client"].to_numpy()
    phase = events["phase"]
    mine = (phase.str.startswith("compute") & (client >= 0)).to_numpy()
    speeds = clients.set_index("client")["device_flops_per_s"]
    rate[mine] = speeds.reindex(client[mine]).to_numpy(dtype=float)
    server = (client < 0) & ((phase == "aggregate") | phase.str.startswith("server:")).to_numpy()
    if facts.server_flops_per_s is not None:
        rate[server] = facts.server_flops_per_s
    if "cell" in events and facts.cell_flops_per_s:
        cell = events["cell"].to_numpy()
        for k, speed in enumerate(facts.cell_flops_per_s):
            rate[server & (cell == k)] = np.nan if speed is None else speed
    return rate


def _transfers(events: pd.DataFrame) -> np.ndarray:
    """Rows that move bits over the air: upload senders, download receivers, sends."""
    direction, role = events["direction"], events["role"]
    return (
        ((direction == "up") & (role == "sender")) | ((direction == "down") & (role != "none"))
    ).to_numpy() & (role != "backhaul").to_numpy()


def transfer_rate(events: pd.DataFrame, clients: pd.DataFrame, settings: dict[str, Any]) -> Check:
    """Bits = effective rate x air time; the rate within Shannon's bound at its SINR."""
    check = Check("transfer rate")
    moving = _transfers(events) & (events["duration_s"].to_numpy(dtype=float) > 0)
    moving &= np.isfinite(events["rate_bps"].to_numpy(dtype=float))
    rows = events[moving]
    check.examined = len(rows)
    bits = 8 * rows["bytes"].to_numpy(dtype=float)
    carried = rows["rate_bps"].to_numpy(dtype=float) * rows["duration_s"].to_numpy(dtype=float)
    # a transfer cut off by the run's end counts the whole bytes it moved (rounded down)
    cut = rows["phase"].str.endswith(":cutoff").to_numpy()
    slack = np.where(cut, 8.0, 0.0)
    tol = RTOL * np.maximum(bits, carried) + 1e-6
    bad = (carried < bits - tol) | (carried > bits + slack + tol)
    check.problems = _first(
        rows[bad],
        lambda r: (
            f"{r.phase} of client {r.client} at t={r.t_start:.9g}: {8 * r.bytes} bits, "
            f"rate x air time = {r.rate_bps * r.duration_s:.12g}"
        ),
    )
    band = _widest_band_hz(rows, clients, settings)
    snr = rows["snr_db"].to_numpy(dtype=float)
    with np.errstate(over="ignore"):
        bound = band * np.log2(1 + 10 ** (snr / 10))
    seconds = rows["duration_s"].to_numpy(dtype=float)
    over = np.isfinite(bound) & (
        rows["rate_bps"].to_numpy(dtype=float) > bound * (1 + RTOL) + slack / seconds
    )
    check.problems += _first(
        rows[over].assign(bound=bound[over]),
        lambda r: (
            f"{r.phase} of client {r.client} at t={r.t_start:.9g}: {r.rate_bps:.12g} bit/s "
            f"beats B log2(1 + SINR) = {r.bound:.12g} bit/s at {r.snr_db:.6g} dB"
        ),
    )
    return check


def _widest_band_hz(rows: pd.DataFrame, clients: pd.DataFrame, settings: dict[str, Any]) -> Any:
    """The most band each row's link could use: its own band or the cell's, whichever
    is wider (NaN where the settings fix the spectral efficiency instead)."""
    if settings.get("network.spectral_efficiency") is not None:
        return np.full(len(rows), np.nan)
    own = clients.set_index("client")["bandwidth_mhz"].reindex(rows["client"]).to_numpy() * 1e6
    shared = [
        settings.get("network.uplink.total_bandwidth_mhz"),
        settings.get("network.downlink.bandwidth_mhz"),
    ]
    cell = max((float(b) for b in shared if b is not None), default=0.0) * 1e6
    return np.fmax(np.nan_to_num(own, nan=0.0), cell)


def constant_links(settings: dict[str, Any]) -> str | None:
    """Why a run's links are not constant over a transfer (None: they are)."""
    reasons = {
        "the preset fixes the spectral efficiency": settings.get("network.spectral_efficiency")
        is not None
        or settings.get("network.preset", "physical") != "physical",
        "fading": settings.get("network.fading", "none") != "none",
        "several cells": len(settings.get("network.cells") or []) > 1,
        "moving clients": settings.get("clients.mobility.model", "static") != "static",
    }
    return next((why for why, holds in reasons.items() if holds), None)


def link_budget(
    events: pd.DataFrame,
    clients: pd.DataFrame,
    settings: dict[str, Any],
    decisions: pd.DataFrame | None = None,
) -> Check:
    """Constant links: each upload's and broadcast receiver's SNR in closed form."""
    check = Check("link budget")
    why = constant_links(settings)
    if why is not None:
        check.skipped = f"links vary ({why}): the replay recomputes them"
        return check
    gain = _gain(clients, settings)
    noise_w_hz = watts(settings["network.noise_psd_dbm_hz"])
    by_client = clients.set_index("client")
    uploads = (events["direction"] == "up") & (events["role"] == "sender")
    if settings.get("network.uplink.total_bandwidth_mhz") is not None:
        uploads &= False  # a shared band: each share's SNR depends on who else is on it
    down = (events["direction"] == "down") & (events["role"] == "receiver")
    down &= settings.get("network.downlink.mode") == "broadcast"
    rows = events[(uploads | down) & (events["client"] >= 0) & events["snr_db"].notna()]
    rows = rows[rows["duration_s"] > 0]
    up = (rows["direction"] == "up").to_numpy()
    from mecsim.analysis.decisions import upload_powers

    sent = upload_powers(rows, clients, decisions)  # power control's choice, or the maximum
    power = np.where(up, sent, watts(settings["network.downlink.tx_power_dbm"]))
    band = np.where(
        up,
        by_client["bandwidth_mhz"].reindex(rows["client"]).to_numpy() * 1e6,
        float(settings["network.downlink.bandwidth_mhz"]) * 1e6,
    )
    expected = 10 * np.log10(power * gain.reindex(rows["client"]).to_numpy() / (noise_w_hz * band))
    got = rows["snr_db"].to_numpy(dtype=float)
    bad = ~_close(got, expected, 1e-9)
    check.examined = len(rows)
    check.problems = _first(
        rows[bad].assign(expected=expected[bad]),
        lambda r: (
            f"{r.phase} of client {r.client} at t={r.t_start:.9g}: SNR {r.snr_db:.12g} dB, "
            f"P g(d) / (N0 B) = {r.expected:.12g} dB"
        ),
    )
    return check


def _gain(clients: pd.DataFrame, settings: dict[str, Any]) -> pd.Series:
    """Each client's log-distance power gain to its base station."""
    constant = 10 ** (float(settings["network.pathloss_db"]) / 10)
    reference = float(settings["network.reference_m"])
    exponent = float(settings["network.exponent"])
    distance = clients.set_index("client")["distance_m"].astype(float)
    return constant * (distance / reference) ** -exponent


def promptness(events: pd.DataFrame, facts: RunFacts) -> Check:
    """A client's first computation of a job starts when the download it waited for
    ends, and its first upload (or wait for spectrum) when the computation before it
    ends: no delay the table does not show."""
    check = Check("promptness")
    if facts.protocol == "wait_free":  # personal training runs inside the download window
        check.skipped = "wait-free rounds train during the download window"
        return check
    rows = events[(events["client"] >= 0) & (events["round"] >= 0)]
    phase = rows["phase"]
    down = ((rows["direction"] == "down") & (rows["role"] == "receiver")).to_numpy()
    down = down & ~phase.str.endswith(":public").to_numpy()
    compute = phase.str.startswith("compute").to_numpy()
    send = ((rows["direction"] == "up") & (rows["role"] == "sender")) | (phase == "wait:spectrum")
    pairs = [("compute", down, compute), ("upload", compute, send.to_numpy())]
    for what, before, after in pairs:
        late = _gaps(rows, before, after)
        check.examined += len(late)
        bad = late["gap"] > _clock_tol(late)
        check.problems += _first(
            late[bad],
            lambda r, what=what: (
                f"client {r.client}, job {r.job}: its {what} starts at t={r.t_start:.9g}, "
                f"{r.gap:.9g} s after what it waited for ended"
            ),
        )
    return check


def _gaps(rows: pd.DataFrame, before: np.ndarray, after: np.ndarray) -> pd.DataFrame:
    """Per (client, job): the first ``after`` row that starts once a ``before`` row has
    ended, and its gap to the latest such end."""
    keys = ["client", "job"]
    ends = rows.loc[before, [*keys, "t_end"]].rename(columns={"t_end": "ready"})
    starts = rows.loc[after, [*keys, "t_start", "t_end"]]
    merged = starts.merge(ends, on=keys)
    merged = merged[merged["ready"] <= merged["t_start"] + _clock_tol(merged)]
    if merged.empty:
        return merged.assign(gap=[])
    latest = merged.groupby([*keys, "t_start"], as_index=False)["ready"].max()
    first = latest.sort_values("t_start").groupby(keys, as_index=False).first()
    # a job's ``after`` rows that begin before its ``before`` rows end (a second task,
    # a retry) were waiting on something else: only the first one after is prompt
    return first.assign(gap=first["t_start"] - first["ready"], t_end=first["t_start"])


def idle_energy(
    events: pd.DataFrame, rounds: pd.DataFrame, clients: pd.DataFrame, summary: dict[str, Any]
) -> Check:
    """``energy_j.client_idle`` and ``energy_j.total`` from each client's waiting."""
    check = Check("idle energy")
    energy = summary.get("energy_j")
    if not isinstance(energy, dict) or "client_idle" not in energy:
        check.skipped = "summary.json has no energy_j.client_idle"
        return check
    if "idle_power_w" not in clients:
        check.skipped = "the clients table has no idle_power_w (an older run)"
        return check
    seconds = waiting_seconds(events, rounds)
    power = clients.set_index("client")["idle_power_w"].reindex(seconds.index).fillna(0.0)
    idle = float((seconds * power).sum())
    total = float(events["energy_j"].sum()) + idle
    for key, value in (("client_idle", idle), ("total", total)):
        if key in energy:
            check.examined += 1
            if not math.isclose(float(energy[key]), value, rel_tol=RTOL, abs_tol=1e-12):
                check.problems.append(f"energy_j.{key} = {energy[key]!r}, recomputed {value!r}")
    return check


def waiting_seconds(events: pd.DataFrame, rounds: pd.DataFrame) -> pd.Series:
    """Per client: in each round it has rows in, the span from its first row to the
    round's end (or its last row, if later) less the union of its busy intervals."""
    rows = events[(events["client"] >= 0) & (events["round"] >= 0)]
    if rows.empty:
        return pd.Series(dtype=float)
    keys = ["round", "client"]
    span = rows.groupby(keys).agg(first=("t_start", "min"), last=("t_end", "max"))
    ends = rounds.set_index("round")["t_end"]
    round_end = ends.reindex(span.index.get_level_values("round")).to_numpy(dtype=float)
    stop = np.fmax(span["last"].to_numpy(), np.nan_to_num(round_end, nan=-np.inf))
    busy = rows[rows["phase"].str.startswith(BUSY)].sort_values([*keys, "t_start"])
    # merge each group's intervals: a block opens where a row starts after all before it
    reach = busy.groupby(keys)["t_end"].cummax()
    before = reach.groupby([busy["round"], busy["client"]]).shift()
    opens = before.isna() | (busy["t_start"] > before)
    block = opens.cumsum()
    merged = busy.groupby(block).agg(
        round=("round", "first"),
        client=("client", "first"),
        a=("t_start", "min"),
        b=("t_end", "max"),
    )
    covered = (merged["b"] - merged["a"]).groupby([merged["round"], merged["client"]]).sum()
    covered = covered.reindex(span.index, fill_value=0.0).to_numpy()
    idle = np.clip(stop - span["first"].to_numpy() - covered, 0.0, None)
    return pd.Series(idle, index=span.index).groupby(level="client").sum()


def run_times(events: pd.DataFrame, rounds: pd.DataFrame, summary: dict[str, Any]) -> Check:
    """``sim_time_s`` = the last round's end or its last row's, ``mean_round_s`` = the mean
    round length."""
    check = Check("run times")
    if rounds.empty:
        return check
    last_rows = events[events["round"].between(-1, int(rounds["round"].iloc[-1]))]
    ends = [*rounds["t_end"], *rounds.get("t_personal", []), *last_rows["t_end"]]
    expected = {
        "sim_time_s": max(t for t in ends if t == t),  # NaN (no personal models) left out
        "mean_round_s": float((rounds["t_end"] - rounds["t_start"]).mean()),
    }
    for key, value in expected.items():
        if isinstance(summary.get(key), int | float):
            check.examined += 1
            if not math.isclose(float(summary[key]), value, rel_tol=RTOL, abs_tol=1e-12):
                check.problems.append(f"{key} = {summary[key]!r}, the rounds give {value!r}")
    return check


def handover_breaks(events: pd.DataFrame, settings: dict[str, Any]) -> Check:
    """Each handover row: no bytes, no energy, the interruption's length (at most it, cut
    off)."""
    check = Check("handover breaks")
    rows = events[events["phase"].str.startswith("handover")]
    if rows.empty:
        check.skipped = "no handovers"
        return check
    check.examined = len(rows)
    interruption = float(settings.get("network.handover_interruption_s", 0.05))
    seconds = rows["duration_s"].to_numpy(dtype=float)
    whole = (rows["phase"] == "handover").to_numpy()
    tol = _clock_tol(rows)
    length = np.where(
        whole, ~_close(seconds, np.full(len(rows), interruption), tol), seconds > interruption + tol
    )
    bad = length | (rows["bytes"].to_numpy() != 0) | (rows["energy_j"].to_numpy() != 0)
    check.problems = _first(
        rows[bad],
        lambda r: (
            f"{r.phase} of client {r.client} at t={r.t_start:.9g}: {r.duration_s:.9g} s, "
            f"{r.bytes} bytes, {r.energy_j:.6g} J (a break of {interruption:g} s moves and "
            "draws nothing)"
        ),
    )
    return check


def physics_checks(
    events: pd.DataFrame,
    rounds: pd.DataFrame,
    clients: pd.DataFrame,
    facts: RunFacts,
    settings: dict[str, Any],
    summary: dict[str, Any] | None = None,
) -> list[Check]:
    """Every check of the module docstring."""
    checks = [
        compute_time(events, clients, facts),
        transfer_rate(events, clients, settings),
        link_budget(events, clients, settings, facts.decisions),
        promptness(events, facts),
        handover_breaks(events, settings),
    ]
    if summary is not None:
        checks += [
            idle_energy(events, rounds, clients, summary),
            run_times(events, rounds, summary),
        ]
    return checks
