"""The shared transmitter's fluid engine against closed forms."""

import math

import numpy as np
import pytest
from scipy.special import exp1

from mecsim.channels.fading import NoFading, RayleighFading
from mecsim.channels.link import LinkBudget
from mecsim.channels.sharing import (
    FadingTrack,
    PermanentOutage,
    Reception,
    SharedTransmitter,
    Transmission,
)

B, P, N0 = 1e6, 1.0, 1e-12  # Hz, W, W/Hz


def link(path_gain: float, **kwargs) -> LinkBudget:
    return LinkBudget(path_gain=path_gain, noise_psd_w_hz=N0, **kwargs)


def still(client: int, bits: float, path_gain: float, **kwargs) -> Reception:
    return Reception(client, bits, link(path_gain), FadingTrack(NoFading(), None, None), **kwargs)


def full_band_rate(path_gain: float) -> float:
    return B * math.log2(1 + P * path_gain / (N0 * B))


def run(*transmissions: Transmission) -> SharedTransmitter:
    radio = SharedTransmitter(B, P)
    for t in transmissions:
        radio.start(t)
    radio.advance(math.inf)
    return radio


def test_n_equal_unicast_receivers_take_n_times_one_receivers_full_band_time():
    bits, gain = 8e6, 1e-6
    alone = still(0, bits, gain)
    run(Transmission([alone]))
    many = [still(c, bits, gain) for c in range(5)]
    run(*(Transmission([r]) for r in many))

    assert alone.end == pytest.approx(bits / full_band_rate(gain))
    for r in many:
        assert r.end == pytest.approx(5 * alone.end)


def test_total_unicast_throughput_never_exceeds_the_best_full_band_rate():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(2, 8))
        gains = 10 ** rng.uniform(-8, -5, n)
        bits = rng.uniform(1e5, 1e7, n)
        receptions = [still(c, b, g) for c, (b, g) in enumerate(zip(bits, gains, strict=True))]
        run(*(Transmission([r]) for r in receptions))
        # whenever k receivers remain, each holds B/k at P/k: the bits delivered by time t
        # never exceed t times the best receiver's full-band, full-power rate
        for t in sorted(r.end for r in receptions):
            delivered = sum(r.bits for r in receptions if r.end <= t)
            assert delivered <= t * max(full_band_rate(g) for g in gains) * (1 + 1e-9)


def test_server_energy_is_full_power_times_busy_time_however_the_band_is_split():
    receptions = [still(c, 1e6 * (c + 1), 1e-6) for c in range(4)]
    transmissions = [Transmission([r]) for r in receptions]
    run(*transmissions)

    busy = max(r.end for r in receptions)
    assert sum(t.energy_j for t in transmissions) == pytest.approx(P * busy)


def test_rateless_broadcast_each_at_its_own_rate_worst_all_at_the_slowest():
    gains = [1e-5, 1e-6, 1e-7]
    rateless = [still(c, 1e6, g) for c, g in enumerate(gains)]
    run(Transmission(rateless))
    worst = [still(c, 1e6, g) for c, g in enumerate(gains)]
    run(Transmission(worst, worst=True))

    for r, g in zip(rateless, gains, strict=True):
        assert r.end == pytest.approx(1e6 / full_band_rate(g))
    slowest = 1e6 / full_band_rate(min(gains))
    assert [r.end for r in worst] == pytest.approx([slowest] * 3)


def test_block_rayleigh_fading_converges_to_the_ergodic_rate():
    """1,000 coherence blocks: time = bits / E[B log2(1 + rho g)], g ~ Exp(1),
    E[log2(1 + rho g)] = e^(1/rho) E1(1/rho) / ln 2."""
    gain, coherence = 1e-4, 0.01
    rho = P * gain / (N0 * B)  # 20 dB mean SNR
    ergodic = B * math.exp(1 / rho) * exp1(1 / rho) / math.log(2)
    bits = ergodic * coherence * 1000
    track = FadingTrack(RayleighFading(), np.random.default_rng(7), coherence)
    r = Reception(0, bits, link(gain), track)
    run(Transmission([r]))

    assert r.end / coherence == pytest.approx(1000, rel=0.03)
    assert r.end == pytest.approx(bits / ergodic, rel=0.03)


def test_outage_blocks_carry_nothing_and_a_deadline_fails_the_transfer():
    gain, coherence = 1e-6, 0.01
    threshold = P * gain / (N0 * B)  # the mean SNR: about 63 % of Rayleigh blocks are below
    track = FadingTrack(RayleighFading(), np.random.default_rng(1), coherence)
    r = Reception(0, 1e5, link(gain), track, min_sinr=threshold)
    run(Transmission([r]))
    assert not r.failed
    # time spent equals the blocks needed, some of which carried nothing
    gains = [track.gain(k) for k in range(r.block + 1)]
    assert any(g < 1 for g in gains) and gains[-1] >= 1

    hopeless = Reception(
        1, 1e9, link(gain), FadingTrack(NoFading(), None, None), max_s=2.0, min_sinr=1e9
    )
    run(Transmission([hopeless]))
    assert hopeless.failed and hopeless.end == pytest.approx(2.0)

    forever = Reception(2, 1e6, link(gain), FadingTrack(NoFading(), None, None), min_sinr=1e9)
    with pytest.raises(PermanentOutage, match="max_transfer_s"):
        run(Transmission([forever]))


def test_interference_psd_scales_with_the_band_a_fixed_power_does_not():
    psd = link(1e-6, interference_psd_w_hz=3 * N0)
    fixed = link(1e-6, interference_w=3 * N0 * B)
    for share in (B, B / 4):
        power = P * share / B
        _, sinr_psd = psd(share, power, 1.0)
        assert sinr_psd == pytest.approx(P * 1e-6 / (4 * N0 * B))  # same at every share
    _, full = fixed(B, P, 1.0)
    _, quarter = fixed(B / 4, P / 4, 1.0)
    assert quarter < full  # the whole interference power lands on a quarter of the signal
