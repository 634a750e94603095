"""Timing in one place: the engine's functions give bit-identical results on floats (the
event path) and on arrays (bulk rounds), entry by entry."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mecsim.channels.link import LinkBudget, link_rate
from mecsim.channels.sharing import (
    effective_rate,
    finish_within,
    mean_sinr_db,
    send_time,
    step_length,
)
from mecsim.learning.devices import compute_seconds, energy_j

positive = st.floats(1e-6, 1e12, allow_nan=False, allow_infinity=False)
nonnegative = st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False)


def rows_of(*values: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(st.tuples(*values), min_size=1, max_size=8)


def columns(rows: list[tuple]) -> list[np.ndarray]:
    return [np.array(column, dtype=float) for column in zip(*rows, strict=True)]


def each(function: Callable, *arrays: np.ndarray) -> list:
    """``function`` on floats, entry by entry (the event path)."""
    return [function(*map(float, entry)) for entry in zip(*arrays, strict=True)]


def same(scalars: list[float], array: np.ndarray) -> bool:
    """Bit for bit, nan equal to nan."""
    return np.array_equal(np.asarray(scalars, dtype=float), array, equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(rows_of(positive, nonnegative, positive, nonnegative), st.sampled_from([None, 2.0]))
def test_link_rate_on_arrays_is_the_budget_of_each_link(rows, efficiency):
    bandwidth, power, path_gain, interference = columns(rows)
    noise_psd = 4e-21
    rates, sinrs = link_rate(
        bandwidth, power, 1.0, path_gain, noise_psd, 0.0, interference, efficiency
    )

    def budget(w: float, p: float, h: float, i: float) -> tuple[float, float]:
        return LinkBudget(h, noise_psd, 0.0, i, efficiency)(w, p, 1.0)

    scalar = each(budget, bandwidth, power, path_gain, interference)
    assert same([r for r, _ in scalar], np.asarray(rates))
    assert same([s for _, s in scalar], np.asarray(sinrs))


@settings(max_examples=60, deadline=None)
@given(rows_of(nonnegative, nonnegative, nonnegative, nonnegative))
def test_transfer_steps_agree_on_floats_and_arrays(rows):
    remaining, rate, t, horizon = columns(rows)
    need = send_time(remaining, rate)
    assert same(each(send_time, remaining, rate), need)
    step = step_length(t, horizon)
    assert same(each(step_length, t, horizon), step)
    end, air = finish_within(t, need, step)
    pairs = each(finish_within, t, need, step)
    assert same([e for e, _ in pairs], end) and same([a for _, a in pairs], air)
    assert np.all(air <= step) and np.all(end >= t)
    assert np.all(np.isinf(need[rate == 0]))


@settings(max_examples=60, deadline=None)
@given(rows_of(nonnegative, nonnegative))
def test_reported_sinr_rate_time_and_energy_agree_on_floats_and_arrays(rows):
    value, duration = columns(rows)
    assert same(each(mean_sinr_db, value, duration), mean_sinr_db(value, duration))
    assert same(each(effective_rate, value, duration), effective_rate(value, duration))
    assert same(each(lambda f: compute_seconds(f, 2e9), value), compute_seconds(value, 2e9))
    assert same(each(lambda d: energy_j(0.5, d), duration), energy_j(0.5, duration))
    assert np.all(np.isnan(mean_sinr_db(value, duration)[duration == 0]))
    assert math.isnan(mean_sinr_db(1.0, 0.0))
