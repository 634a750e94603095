"""The per-round cost breakdown, on hand-built events tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mecsim.analysis.costs import idle_seconds, summarize, time_split


def _event(round_, client, phase, start, end, direction="none", role="none", nbytes=0):
    return {
        "round": round_,
        "job": round_,
        "client": client,
        "phase": phase,
        "direction": direction,
        "role": role,
        "t_start": start,
        "t_end": end,
        "bytes": nbytes,
        "flops": 0,
        "energy_j": 0.0,
        "rate_bps": float("nan"),
        "snr_db": float("nan"),
    }


EVENTS = pd.DataFrame(
    [
        _event(-1, -1, "downlink-send:public", 0.0, 4.0, "down", "sender", 100),
        _event(-1, 0, "download:public", 0.0, 4.0, "down", "receiver", 100),
        _event(-1, 1, "download:public", 0.0, 3.0, "down", "receiver", 100),
        *[
            row
            for r, t in ((0, 4.0), (1, 20.0))
            for row in (
                _event(r, 0, "download", t, t + 1, "down", "receiver", 10),
                _event(r, 1, "download", t, t + 3, "down", "receiver", 10),
                _event(r, 0, "compute:local", t + 1, t + 6),
                _event(r, 1, "compute:local", t + 3, t + 6),
                _event(r, 0, "upload", t + 6, t + 8, "up", "sender", 7),
                _event(r, 1, "upload", t + 6, t + 10, "up", "sender", 7),
                _event(r, -1, "aggregate", t + 10, t + 11),
                _event(r, -1, "server:ensemble-distill", t + 11, t + 14),
            )
        ],
    ]
)
ROUNDS = pd.DataFrame(
    {
        "round": [0, 1],
        "t_start": [4.0, 20.0],
        "t_end": [18.0, 34.0],
        "wall_s": [0.1, 0.1],
        "bytes_up": [14, 14],
        "bytes_down": [20, 20],
        "generic_acc": [0.5, 0.6],
        "personal_acc": [0.5, 0.7],
        "personal_acc_std": [0.1, 0.1],
    }
)


def test_time_split_is_per_round_and_counts_server_tasks():
    split = time_split(EVENTS)
    # the public download (round -1) is not a round: means are over rounds 0 and 1
    assert split["download"] == pytest.approx((1 + 3) / 2)
    assert split["compute"] == pytest.approx((5 + 3) / 2)
    assert split["upload"] == pytest.approx((2 + 4) / 2)
    assert split["server"] == pytest.approx(1 + 3)  # aggregation and the server task


def test_summary_separates_the_public_download():
    summary = summarize(EVENTS, ROUNDS)
    assert summary["public_bytes_down_total"] == 200
    assert summary["public_download_s"] == pytest.approx(4.0)
    assert summary["bytes_down_total"] == 200 + 4 * 10  # receivers' bytes, rounds included
    assert summary["bytes_up_total"] == 4 * 7


def _idle_by_sweep(events: pd.DataFrame, rounds: pd.DataFrame) -> dict[int, float]:
    """Reference: one interval sweep per (round, client), written as a plain loop."""
    ends = dict(zip(rounds["round"], rounds["t_end"], strict=True))
    idle: dict[int, float] = {}
    own = events[(events["client"] >= 0) & (events["round"] >= 0)]  # rows of a round
    for (round_, client), rows in own.groupby(["round", "client"]):
        stop = max(ends.get(round_, rows["t_end"].max()), rows["t_end"].max())
        start, busy, reach = rows["t_start"].min(), 0.0, rows["t_start"].min()
        spans = rows[rows["phase"].str.startswith(("download", "compute", "upload"))]
        for a, b in sorted(zip(spans["t_start"], spans["t_end"], strict=True)):
            if b > reach:
                busy, reach = busy + b - max(a, reach), b
        idle[int(client)] = idle.get(int(client), 0.0) + max(stop - start - busy, 0.0)
    return idle


def test_idle_seconds_counts_overlapping_busy_spans_once():
    events = pd.DataFrame(
        {
            "round": [0, 0, 0, 0, 1, -1],
            "client": [0, 0, 0, 1, 0, 0],
            "phase": ["download", "compute", "upload", "compute", "wait:up", "download:public"],
            "t_start": [0.0, 1.0, 2.5, 0.0, 10.0, -3.0],
            "t_end": [2.0, 3.0, 4.0, 1.0, 11.0, -1.0],
        }
    )
    rounds = pd.DataFrame({"round": [0, 1], "t_end": [6.0, 12.0]})

    idle = idle_seconds(events, rounds)

    # client 0: round 0 busy [0, 4] of [0, 6] -> 2; round 1 waits [10, 12] -> 2;
    # round -1 (the public download, before any round) opens no waiting
    assert idle.to_dict() == {0: 4.0, 1: 5.0}


def test_handovers_between_a_clients_rounds_add_no_idle_time():
    # a client crossing a boundary and back during its download: its handover rows (round
    # -1, no bytes, no energy) fall inside round 0, where it was never idle
    events = pd.DataFrame(
        {
            "round": [0, 0, 0, -1, -1],
            "client": [0, 0, 0, 0, 0],
            "phase": ["download", "compute:local", "upload", "handover", "handover"],
            "t_start": [0.0, 1.0, 2.0, 0.3, 0.7],
            "t_end": [1.0, 2.0, 3.0, 0.35, 0.75],
        }
    )
    rounds = pd.DataFrame({"round": [0], "t_end": [3.0]})
    assert idle_seconds(events, rounds).to_dict() == {0: 0.0}


@given(st.integers(0, 10_000))
@settings(max_examples=30, deadline=None)
def test_idle_seconds_equals_a_plain_interval_sweep(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    starts = rng.uniform(0, 10, n).round(1)
    events = pd.DataFrame(
        {
            "round": rng.integers(-1, 3, n),
            "client": rng.integers(-1, 4, n),
            "phase": rng.choice(["download", "compute:personal", "upload", "wait:up"], n),
            "t_start": starts,
            "t_end": starts + rng.uniform(0, 3, n).round(1),
        }
    )
    rounds = pd.DataFrame({"round": [0, 1, 2], "t_end": [6.0, 9.0, 14.0]})

    ours = idle_seconds(events, rounds)
    assert set(ours.index) == set(_idle_by_sweep(events, rounds))
    for client, value in _idle_by_sweep(events, rounds).items():
        assert ours[client] == pytest.approx(value, abs=1e-9)


@given(st.integers(0, 10_000))
@settings(max_examples=30, deadline=None)
def test_time_split_equals_plain_per_round_means(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    phases = ["download", "compute:local", "upload", "wait:up", "aggregate", "server:x"]
    starts = rng.uniform(0, 10, n).round(1)
    events = pd.DataFrame(
        {
            "round": rng.integers(-1, 3, n),
            "client": rng.integers(-1, 4, n),
            "phase": rng.choice(phases, n),
            "t_start": starts,
            "t_end": starts + rng.uniform(0, 3, n).round(1),
        }
    )
    kinds = {"compute:local": "compute", "aggregate": "server", "server:x": "server"}
    totals: dict[tuple, float] = {}  # seconds per (round, kind, client)
    for row in events.itertuples():
        kind = kinds.get(row.phase, row.phase)
        if kind != "wait:up":
            key = (row.round, kind, row.client)
            totals[key] = totals.get(key, 0.0) + row.t_end - row.t_start
    rounds = max(len(set(events["round"]) - {-1}), 1)
    for kind in ("upload", "download", "compute", "server"):
        means = []
        for r in sorted(set(events["round"])):
            of_round = [v for (rr, k, _), v in totals.items() if rr == r and k == kind]
            if of_round:
                means.append(sum(of_round) / len(of_round))
        assert time_split(events)[kind] == pytest.approx(sum(means) / rounds, abs=1e-9)


def test_bytes_on_the_air_count_a_broadcast_once_and_a_unicast_per_client(tiny):
    """rounds.bytes_down sums what the clients received; bytes_down_air what the server
    sent: a broadcast once (COMET Table III's convention), unicasts once per client."""
    import copy

    import mecsim

    broadcast = mecsim.run(copy.deepcopy(tiny), ["protocol.rounds=2"], write=False)
    unicast = mecsim.run(tiny, ["protocol.rounds=2", "network.downlink.mode=unicast"], write=False)
    payload = 13_706 * 4  # cnn-small's parameters, float32
    for result, sends in ((broadcast, 1), (unicast, 4)):
        rounds = result.rounds
        assert (rounds["bytes_down"] == 4 * payload).all()  # 4 clients received it
        assert (rounds["bytes_down_air"] == sends * payload).all()
        assert result.summary["bytes_down_air_total"] == 2 * sends * payload
        assert result.summary["bytes_down_air_per_round"] == sends * payload


def test_report_gives_comets_table_iii_communication_cost():
    """m clients upload |P| x N logits and the server broadcasts c centroids of |P| x N:
    over R rounds COMET's Table III counts R (m + c) |P| N parameters."""
    from mecsim.analysis.report import _parameters_communicated

    m, c, public, classes, rounds = 10, 3, 2000, 10, 200
    summary = {
        "rounds": rounds,
        "bytes_up_per_round": m * public * classes * 4,
        "bytes_down_air_per_round": c * public * classes * 4,
    }
    assert "5.2e+07" in _parameters_communicated(summary)[0]  # Table III: COMET (c = 3)
