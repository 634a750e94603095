"""Per-round cost breakdown from the events table (KAPC Table 5/6 style).

The time split averages, per round, each phase's duration over the clients
that ran it (upload, download, client compute), plus the server's aggregation
time; percentages are of the sum of the four, as in KAPC Table 5.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

PHASES = ("upload", "download", "compute", "server")


def _phase_kind(phase: str) -> str | None:
    if phase == "aggregate":
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
    frame = events.assign(
        kind=events["phase"].map(_phase_kind), seconds=events["t_end"] - events["t_start"]
    )
    frame = frame[frame["kind"].notna()]
    rounds = events["round"].nunique()
    # total per (round, client, kind), then mean over the clients of a round, then over rounds
    per_client = frame.groupby(["round", "client", "kind"])["seconds"].sum()
    per_round = per_client.groupby(["round", "kind"]).mean().unstack("kind")
    per_round = per_round.reindex(columns=list(PHASES)).fillna(0.0)
    return {kind: float(per_round[kind].sum() / rounds) for kind in PHASES}


def summarize(events: pd.DataFrame, rounds: pd.DataFrame) -> dict[str, Any]:
    """Totals and per-round means of time, bytes, FLOPs and energy, and final accuracies."""
    num_rounds = len(rounds)
    client_rows = events[events["client"] >= 0]
    server_rows = events[events["client"] < 0]
    split = time_split(events)
    split_total = sum(split.values())
    durations = rounds["t_end"] - rounds["t_start"]

    def last_valid(column: str) -> float:
        values = rounds[column].dropna()
        return float(values.iloc[-1]) if len(values) else math.nan

    def best(column: str) -> float:
        values = rounds[column].dropna()
        return float(values.max()) if len(values) else math.nan

    return {
        "rounds": num_rounds,
        "sim_time_s": float(rounds["t_end"].iloc[-1]) if num_rounds else 0.0,
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
        "bytes_up_total": int(rounds["bytes_up"].sum()),
        "bytes_down_total": int(rounds["bytes_down"].sum()),
        "client_flops_per_round": float(client_rows["flops"].sum() / max(num_rounds, 1)),
        "server_flops_per_round": float(server_rows["flops"].sum() / max(num_rounds, 1)),
        "energy_j": {
            "client_compute": float(
                client_rows.loc[client_rows["phase"].str.startswith("compute"), "energy_j"].sum()
            ),
            "client_transmit": float(
                client_rows.loc[client_rows["phase"] == "upload", "energy_j"].sum()
            ),
            "server": float(server_rows["energy_j"].sum()),
            "total": float(events["energy_j"].sum()),
        },
    }
