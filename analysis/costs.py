"""Per-round cost breakdown from the events table (KAPC Table 5/6 style).

The time split averages, per round, each phase's duration over the clients
that ran it (upload, download, client compute), plus the server's aggregation
and server-task time (FedDF's distillation); percentages are of the sum of the four, as in KAPC Table 5.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from mecsim.engine.recorder import BYTE_FLOWS, flow

PHASES = ("upload", "download", "compute", "server")


def _phase_kind(phase: str) -> str | None:
    if phase == "aggregate" or phase.startswith("server:"):  # aggregation, server tasks
        return "server"
    if phase.startswith("compute"):
        return "compute"
    if phase in ("upload", "download"):
        return phase
    return None


def time_split(events: pd.DataFrame) -> dict[str, float]:
    """Mean seconds per round of each phase (per-client mean for client phases)."""
    if events.empty:
        return dict.fromkeys(PHASES, 0.0)
    # each row's kind, by position in PHASES (-1: untimed), through the few distinct phases
    # (mapping the column itself would make a Python str per row)
    of_phase, phases = pd.factorize(events["phase"])
    codes = [PHASES.index(k) if (k := _phase_kind(p)) else -1 for p in phases]
    kind = np.array([*codes, -1], dtype=np.int64)[of_phase]  # a missing phase (-1): untimed
    timed = kind >= 0
    rounds = events.loc[events["round"] >= 0, "round"].nunique()  # not the public download
    round_ = events["round"].to_numpy()[timed]
    client = events["client"].to_numpy()[timed]
    seconds = (events["t_end"] - events["t_start"]).to_numpy()[timed]
    # total per (round, client, kind), then mean over the clients of a round, then over
    # rounds; through integer keys ordered as (round, client, kind) and (round, kind):
    # grouping by several columns held the rows several times over
    n, span = len(PHASES), int(client.max()) + 2 if len(client) else 1  # clients from -1
    key = ((round_ + 1) * span + (client + 1)) * n + kind[timed]
    del round_, client, kind, timed
    per_client = pd.Series(seconds).groupby(key).sum()
    del key, seconds
    keys = per_client.index.to_numpy()
    per_round = per_client.groupby(keys // n // span * n + keys % n).mean()
    round_of, kind_of = np.divmod(per_round.index.to_numpy(), n)
    per_round.index = pd.MultiIndex.from_arrays([round_of - 1, kind_of])
    per_round = per_round.unstack().reindex(columns=range(n)).fillna(0.0)
    per_round.columns = list(PHASES)
    return {kind: float(per_round[kind].sum() / max(rounds, 1)) for kind in PHASES}


BUSY = ("download", "compute", "upload")
"""Phase prefixes during which a client is busy (waiting for spectrum is idle)."""


def idle_seconds(events: pd.DataFrame, rounds: pd.DataFrame) -> pd.Series:
    """Per client: seconds spent waiting in the rounds it took part in.

    In each round a client has events in, from its first activity to the
    round's end (its last activity if later), the time not spent downloading,
    computing or uploading (overlaps count once). Asynchronous clients, which
    start their next job as soon as one ends, come out near zero. Rows of no round
    (round -1: handovers, the public data's download) open no waiting of their own; a
    handover within a round is part of that round's span.
    """
    client = events["client"].to_numpy()
    of_client = (client >= 0) & (events["round"].to_numpy() >= 0)
    if not of_client.any():
        return pd.Series(dtype=float)
    # the client rows' numeric columns (not row copies: tables may hold millions of rows),
    # sorted by (round, client, t_start, t_end)
    busy = events["phase"].str.startswith(BUSY).to_numpy(dtype=bool)[of_client]
    round_ = events["round"].to_numpy()[of_client]
    client = client[of_client]
    t_start = events["t_start"].to_numpy(dtype=float)[of_client]
    t_end = events["t_end"].to_numpy(dtype=float)[of_client]
    order = np.lexsort((t_end, t_start, client, round_))
    round_, client, t_start, t_end, busy = (
        a[order] for a in (round_, client, t_start, t_end, busy)
    )
    # one group per (round, client), its rows contiguous
    new = np.ones(len(order), dtype=bool)
    new[1:] = (round_[1:] != round_[:-1]) | (client[1:] != client[:-1])
    heads = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    start = t_start[heads]  # its first activity (rows are in start order)
    last = np.maximum.reduceat(t_end, heads)
    ends = rounds.set_index("round")["t_end"] if len(rounds) else pd.Series(dtype=float)
    round_end = ends.reindex(round_[heads]).to_numpy(dtype=float)
    stop = np.fmax(np.where(np.isnan(round_end), last, round_end), last)
    # busy time: the union of the busy intervals, swept in start order per group
    of_group = group[busy]
    busy_end = pd.Series(t_end[busy])
    reached = busy_end.groupby(of_group).cummax().groupby(of_group).shift()  # before each row
    reach = np.fmax(reached.to_numpy(), start[of_group])
    covered = np.clip(t_end[busy] - np.maximum(t_start[busy], reach), 0, None)
    busy_s = pd.Series(covered).groupby(of_group).sum()
    busy_s = busy_s.reindex(range(len(heads)), fill_value=0.0).to_numpy()
    idle = np.clip(stop - start - busy_s, 0.0, None)
    per_client = pd.Series(idle, index=pd.Index(client[heads], name="client"))
    per_client = per_client.groupby(level=0).sum()
    return per_client.astype(float).sort_index()


def simulated_time(events: pd.DataFrame, rounds: pd.DataFrame) -> float:
    """Seconds from the start to the end of the run's last round: the later of the rounds'
    ends (personal models' completion included) and the last event of a round (a backhaul
    transfer, training after a wait-free round closed). The new clients' join, after the
    last round (``new_client_join_s``), is not part of it."""
    if rounds.empty:
        return 0.0
    ends = [rounds["t_end"].max(), rounds.get("t_personal", pd.Series(dtype=float)).max()]
    ends.append(events.loc[events["round"] <= rounds["round"].max(), "t_end"].max())
    return float(np.nanmax(np.array(ends, dtype=float)))


def energy_breakdown(
    events: pd.DataFrame, rounds: pd.DataFrame, clients: pd.DataFrame | None = None
) -> dict[str, float]:
    """Joules by consumer over the whole run, and their total: the events' energy plus the
    clients' idle energy (``idle_power_w`` times :func:`idle_seconds`; 0 without a clients
    table). ``server`` is its transmissions and aggregations, ``backhaul`` the edge-cloud
    links (hierarchical runs)."""
    of_client = events["client"] >= 0
    energy_j = events["energy_j"]
    backhaul = (events["role"] == "backhaul").to_numpy()
    idle_j = 0.0
    if clients is not None and "idle_power_w" in clients:
        power = clients.set_index("client")["idle_power_w"]
        idle = idle_seconds(events, rounds)
        idle_j = float((idle * power.reindex(idle.index).fillna(0.0)).sum())
    energy = {
        "client_compute": float(
            energy_j[of_client & events["phase"].str.startswith("compute")].sum()
        ),
        "client_transmit": float(energy_j[of_client & (events["direction"] == "up")].sum()),
        "client_receive": float(energy_j[of_client & (events["direction"] == "down")].sum()),
        "client_idle": idle_j,
        "server": float(energy_j[~of_client & ~backhaul].sum()),
        "backhaul": float(energy_j[backhaul].sum()),
    }
    energy["total"] = float(energy_j.sum()) + idle_j
    return energy


def summarize(
    events: pd.DataFrame, rounds: pd.DataFrame, clients: pd.DataFrame | None = None
) -> dict[str, Any]:
    """Totals and per-round means of time, bytes, FLOPs and energy, and final accuracies.

    Every figure is derived from the events table (idle energy: the clients
    table's ``idle_power_w`` times :func:`idle_seconds`). Byte totals include
    transfers outside the rounds (the public split's download, round -1).
    """
    num_rounds = len(rounds)
    of_client = events["client"] >= 0  # masks, not row copies: tables may hold millions of rows
    flops = events["flops"]
    split = time_split(events)
    split_total = sum(split.values())
    durations = rounds["t_end"] - rounds["t_start"]

    def last_valid(column: str) -> float:
        values = rounds[column].dropna()
        return float(values.iloc[-1]) if len(values) else math.nan

    def best(column: str) -> float:
        values = rounds[column].dropna()
        return float(values.max()) if len(values) else math.nan

    energy = energy_breakdown(events, rounds, clients)
    public = events.loc[events["phase"] == "download:public", ["bytes", "t_start", "t_end"]]
    peaks = (
        clients["state_peak_bytes"]
        if clients is not None and "state_peak_bytes" in clients
        else None
    )
    return {
        "rounds": num_rounds,
        "rounds_without_updates": int((rounds["updates"] == 0).sum()) if "updates" in rounds else 0,
        "sim_time_s": simulated_time(events, rounds),
        "wall_time_s": float(rounds["wall_s"].sum()),
        "mean_round_s": float(durations.mean()) if num_rounds else 0.0,
        "final_generic_acc": last_valid("generic_acc"),
        "final_personal_acc": last_valid("personal_acc"),
        "final_personal_acc_std": last_valid("personal_acc_std"),
        "best_generic_acc": best("generic_acc"),
        "best_personal_acc": best("personal_acc"),
        "time_split_s": split,
        "time_split_pct": {
            k: (100 * v / split_total if split_total else 0.0) for k, v in split.items()
        },
        "bytes_up_per_round": float(rounds["bytes_up"].mean()) if num_rounds else 0.0,
        "bytes_down_per_round": float(rounds["bytes_down"].mean()) if num_rounds else 0.0,
        "bytes_down_air_per_round": float(rounds["bytes_down_air"].mean())
        if num_rounds and "bytes_down_air" in rounds
        else math.nan,
        **{
            f"{column}_total": int(events.loc[flow(events, column), "bytes"].sum())
            for column in BYTE_FLOWS
        },
        "public_bytes_down_total": int(public["bytes"].sum()),
        "public_download_s": float(public["t_end"].max() - public["t_start"].min())
        if len(public)
        else 0.0,
        "client_state_peak_bytes": int(peaks.max()) if peaks is not None and len(peaks) else 0,
        "client_flops_per_round": float(flops[of_client].sum() / max(num_rounds, 1)),
        "server_flops_per_round": float(flops[~of_client].sum() / max(num_rounds, 1)),
        "energy_j": energy,
    }
