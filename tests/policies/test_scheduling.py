"""Scheduling policies (issue 47): each built-in's choice by hand on a small set of
candidates, causality in a run (a policy sees only reports already recorded), the
default leaves runs as they were, the old ``protocol.selection`` key still works, and
bad settings are one line."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import mecsim
from mecsim.common.rng import numpy_rng
from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import SCHEDULERS

QUICK = ["execution.cost_only=true", "output.progress=false", "protocol.rounds=4"]


def candidates(**columns) -> Candidates:
    """Six clients, ids 10..15, with the given columns (others: unknown)."""
    n = 6
    blank = np.full(n, np.nan)
    never = np.full(n, -1, dtype=np.int64)
    values = dict(
        round=5,
        now=1.0,
        ids=np.arange(10, 10 + n),
        num_samples=np.array([10, 20, 30, 40, 50, 60]),
        flops_per_s=np.array([1e9, 2e9, 3e9, 4e9, 5e9, 6e9]),
        snr_db=blank,
        mean_snr_db=blank,
        loss=blank,
        update_norm=blank,
        energy_j=np.zeros(n),
        job_s=blank,
        last_selected=never,
        times_selected=np.zeros(n, dtype=np.int64),
        last_update=never,
    )
    values.update({k: np.asarray(v) for k, v in columns.items()})
    return Candidates(**values)


def choose(policy: str, view: Candidates, k: int, seed: int = 0, **settings) -> list[int]:
    cls = SCHEDULERS.get(policy)
    return (
        cls(cls.Settings(policy=policy, **settings))
        .select(view, k, np.random.default_rng(seed))
        .ids
    )


def test_uniform_and_data_size_are_numpys_draws_without_replacement():
    view = candidates()
    draw = np.random.default_rng(3).choice(6, size=2, replace=False)
    assert choose("uniform", view, 2, seed=3) == sorted(10 + draw)
    p = view.num_samples / view.num_samples.sum()
    draw = np.random.default_rng(3).choice(6, size=2, replace=False, p=p)
    assert choose("data_size", view, 2, seed=3) == sorted(10 + draw)


def test_round_robin_takes_those_chosen_longest_ago_never_first_then_by_id():
    view = candidates(last_selected=[4, -1, 2, 2, 3, -1])
    assert choose("round_robin", view, 2) == [11, 15]  # never chosen
    assert choose("round_robin", view, 3) == [11, 12, 15]  # then round 2, lower id first


def test_best_channel_tries_the_unheard_then_the_highest_sinr():
    view = candidates(snr_db=[3.0, 9.0, np.nan, -2.0, 8.5, 1.0])
    assert choose("best_channel", view, 1) == [12]
    assert choose("best_channel", view, 3) == [11, 12, 14]


def test_proportional_fair_ranks_by_last_over_mean_sinr():
    # last - mean in dB: 1, -2, 0.5, 4, 0, -1 -> the two largest: clients 13 and 10
    view = candidates(
        snr_db=[11.0, 8.0, 5.5, 4.0, 20.0, 0.0], mean_snr_db=[10.0, 10.0, 5.0, 0.0, 20.0, 1.0]
    )
    assert choose("proportional_fair", view, 2) == [10, 13]


def test_age_takes_the_oldest_updates():
    view = candidates(last_update=[4, 1, 3, -1, 1, 4])  # round 5: ages 1, 4, 2, never, 4, 1
    assert choose("age", view, 3) == [11, 13, 14]


def test_power_of_choice_ranks_its_d_draws_by_reported_loss():
    view = candidates(loss=[0.1, 0.9, 0.5, 0.7, 0.3, 0.2])
    p = view.num_samples / view.num_samples.sum()
    drawn = np.sort(np.random.default_rng(7).choice(6, size=4, replace=False, p=p))
    by_loss = sorted(drawn, key=lambda i: -view.loss[i])[:2]
    assert choose("power_of_choice", view, 2, seed=7, d=4) == sorted(10 + np.array(by_loss))


def test_update_aware_keeps_the_best_channels_then_the_largest_norms():
    view = candidates(
        snr_db=[10.0, 9.0, 8.0, 1.0, 0.0, -1.0], update_norm=[1.0, 5.0, 3.0, 9.0, 9.0, 9.0]
    )
    assert choose("update_aware", view, 2, d=3) == [11, 12]  # of 10, 11, 12: norms 5, 3


def test_oort_exploits_by_its_utility_in_closed_form():
    loss = np.array([0.5, 0.2, 0.9, 0.4, 0.8, 0.1])
    job_s = np.array([1.0, 1.0, 4.0, 1.0, 1.0, 1.0])
    view = candidates(loss=loss, job_s=job_s, last_update=[4, 4, 4, 0, 4, 4])
    cls = SCHEDULERS.get("oort")
    settings = cls.Settings(policy="oort", exploration=0.0, min_exploration=0.0, cutoff=1.0,
                            preferred_round_s=2.0)  # fmt: skip
    policy = cls(settings)
    staleness = np.sqrt(0.1 * math.log(6) / (np.array([4, 4, 4, 0, 4, 4]) + 1))
    penalty = np.where(job_s > 2.0, (2.0 / job_s) ** 2, 1.0)
    utility = (view.num_samples * loss + staleness) * penalty
    np.testing.assert_allclose(policy.utility(view, np.ones(6, bool)), utility, rtol=1e-12)
    top = sorted(10 + np.argsort(-utility)[:2])
    selection = policy.select(view, 2, np.random.default_rng(0))  # cutoff 1: the top two
    assert selection.ids == top
    np.testing.assert_allclose(selection.scores, utility[np.array(top) - 10], rtol=1e-12)


def test_oort_explores_unheard_clients_first_while_epsilon_is_high():
    view = candidates(loss=[0.5, np.nan, np.nan, 0.4, np.nan, 0.1], round=0)
    chosen = choose("oort", view, 3, exploration=1.0)
    assert chosen == [11, 12, 14]  # epsilon 1: every slot explores, all three unheard


@pytest.mark.parametrize("policy", ["best_channel", "proportional_fair"])
def test_a_policy_sees_only_the_sinr_reports_recorded_before_its_decision(tiny, policy):
    result = mecsim.run(
        tiny,
        [
            *QUICK,
            "clients.count=8",
            "protocol.clients_per_round=3",
            "network.fading=rayleigh",
            f"scheduling.policy={policy}",
        ],  # fmt: skip
        write=False,
    )
    events, decisions = result.events, result.decisions
    transfers = events[(events["client"] >= 0) & (events["direction"] != "none")]
    transfers = transfers[transfers["snr_db"].notna()]
    checked = 0
    for d in decisions.itertuples():
        past = transfers[(transfers["client"] == d.client) & (transfers["t_end"] <= d.t)]
        if past.empty:
            assert math.isnan(d.value)  # never heard from: ranked first, no score
            continue
        last = past.sort_values("t_end", kind="stable")["snr_db"].iloc[-1]
        linear = 10 ** (past["snr_db"] / 10)
        mean_db = 10 * np.log10(linear.mean())
        expected = last if policy == "best_channel" else last - mean_db
        assert d.value == pytest.approx(expected, rel=1e-12, abs=1e-12)
        checked += 1
    assert checked > 0


def test_uniform_is_the_selection_stream_drawn_as_before(tiny):
    result = mecsim.run(tiny, [*QUICK, "clients.count=10", "protocol.clients_per_round=4"],
                        write=False)  # fmt: skip
    for round_, chosen in result.decisions.groupby("round")["client"]:
        draw = numpy_rng(result.scenario.seed, "selection", round_).choice(10, 4, replace=False)
        assert list(chosen) == sorted(draw.tolist())
    downloads = result.events[result.events["phase"] == "download"]
    pd.testing.assert_series_equal(
        downloads.groupby("round")["client"].apply(sorted),
        result.decisions.groupby("round")["client"].apply(list),
        check_names=False,
    )


def test_protocol_selection_still_chooses_the_policy_with_a_deprecation_warning(tiny):
    base = [*QUICK, "clients.count=10", "protocol.clients_per_round=4"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = mecsim.run(tiny, [*base, "protocol.selection=data_size"], write=False)
    assert any("scheduling.policy = 'data_size'" in str(w.message) for w in caught)
    new = mecsim.run(tiny, [*base, "scheduling.policy=data_size"], write=False)
    pd.testing.assert_frame_equal(old.events, new.events)
    assert old.scenario.scheduling.policy == "data_size"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["scheduling.policy=oortt"], "scheduling.policy: unknown scheduling policy 'oortt'"),
        (["scheduling.policy=oort", "scheduling.exploration=-1"], "scheduling.exploration"),
        (["scheduling.d=3"], "scheduling.d: is a setting of scheduling"),
        (["protocol.selection=data_size", "scheduling.policy=oort"], "protocol.selection"),
        (
            ["scheduling.channel=pilot", "protocol.kind=fedasync"],
            "scheduling.channel: 'pilot' measures each candidate's uplink for its round's upload",
        ),
        (["scheduling.channel=oracle"], "scheduling.channel"),
    ],
)
def test_bad_scheduling_settings_are_one_line(tiny, refused, overrides, field):
    refused(tiny, overrides, field)


def test_age_and_round_robin_choose_alike_when_every_update_arrives(tiny):
    # docs/scheduling.md: without failures "rounds since last chosen" and "rounds since
    # last aggregated" order the clients the same way
    base = [*QUICK, "clients.count=9", "protocol.clients_per_round=4", "protocol.rounds=6"]
    runs = [
        mecsim.run(tiny, [*base, f"scheduling.policy={p}"], write=False).decisions
        for p in ("round_robin", "age")
    ]
    pd.testing.assert_series_equal(runs[0]["client"], runs[1]["client"])
    assert runs[0]["client"].value_counts().max() - runs[0]["client"].value_counts().min() <= 1


PILOT = [
    *QUICK,
    "clients.count=8",
    "protocol.clients_per_round=3",
    "network.fading=rayleigh",
    "network.coherence_ms=1e6",  # quasi-static: an upload is one fading block
    "scheduling.channel=pilot",
]


@pytest.mark.parametrize("policy", ["best_channel", "proportional_fair"])
def test_a_pilot_shows_the_channel_the_rounds_upload_starts_with(tiny, policy):
    """Under ``scheduling.channel = pilot`` a chosen client's score is the SNR its upload
    then has (one block, one cell, no interference): its upload's SINR, less, for
    proportional fair, the SNR without fading, P g / (N0 B) by hand."""
    result = mecsim.run(tiny, [*PILOT, f"scheduling.policy={policy}"], write=False)
    up = result.events[result.events["phase"] == "upload"].set_index(["round", "client"])
    chosen = result.decisions[result.decisions["decision"] == "schedule"]
    clients = result.clients.set_index("client")
    checked = 0
    for d in chosen.itertuples():
        c = clients.loc[d.client]
        gain = 10 ** (-40 / 10) * c["distance_m"] ** -4.0
        noise = 10 ** (-174 / 10) / 1e3 * c["bandwidth_mhz"] * 1e6
        mean_db = 10 * math.log10(10 ** (c["tx_power_dbm"] / 10) / 1e3 * gain / noise)
        snr = up.loc[(d.round, d.client), "snr_db"]
        expected = snr if policy == "best_channel" else snr - mean_db
        assert d.value == pytest.approx(expected, abs=1e-9)
        checked += 1
    assert checked == 4 * 3
    # and it ranks by them: no unchosen client's pilot beats a chosen one's
    assert (result.decisions["value"].notna()).all()


def test_a_pilot_lets_proportional_fair_pick_the_round_best_fades(tiny):
    """The rounds' chosen uploads start on better fades than uniform's (the point of
    measuring the channel at the decision)."""
    fades = {}
    for policy in ("uniform", "proportional_fair"):
        result = mecsim.run(tiny, [*PILOT, "protocol.rounds=12", f"scheduling.policy={policy}"],
                            write=False)  # fmt: skip
        up = result.events[result.events["phase"] == "upload"]
        fades[policy] = up["snr_db"].mean()
    assert fades["proportional_fair"] > fades["uniform"] + 3


def test_an_uplink_threshold_leaves_the_downlink_alone(tiny):
    """``network.uplink.min_snr_db`` puts uploads below it in outage (quasi-static
    fading: they fail at max_transfer_s) while downloads below it still arrive."""
    threshold = -12.0
    result = mecsim.run(
        tiny,
        [*PILOT, "protocol.rounds=6", "network.max_transfer_s=60",
         f"network.uplink.min_snr_db={threshold}"],
        write=False,
    )  # fmt: skip
    events = result.events
    up = events[events["direction"].eq("up") & events["client"].ge(0)]
    down = events[events["phase"] == "download"]
    assert (up.loc[up["phase"] == "upload", "snr_db"] >= threshold).all()
    failed = up[up["phase"] == "upload:failed"]
    assert len(failed) and (failed["snr_db"] < threshold).all()
    assert (down["snr_db"] < threshold).any()  # arrived all the same


def test_at_a_high_threshold_a_pilot_lets_proportional_fair_land_more_updates(tiny):
    """Yang et al.'s mechanism (docs/scheduling.md, block 2): with an SINR threshold near
    the median upload SNR, choosing clients at their own fading peak gets more uploads
    through than a uniform draw."""
    landed = {}
    for policy in ("uniform", "proportional_fair"):
        result = mecsim.run(
            tiny,
            [*PILOT, "protocol.rounds=12", "network.max_transfer_s=60",
             "network.uplink.min_snr_db=-12", f"scheduling.policy={policy}"],
            write=False,
        )  # fmt: skip
        landed[policy] = int(result.rounds["updates"].sum())
    assert landed["proportional_fair"] > 1.3 * landed["uniform"]
