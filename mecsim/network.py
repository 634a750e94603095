"""Client radios and transfer timing: who sends how many bits, how fast, at what SNR.

Uplink is FDMA: each client transmits on its own bandwidth at its own power.
Downlink is either a broadcast (one payload; each receiver decodes at its own
rate on the full server bandwidth, so the server transmits until the slowest
receiver is done) or unicast (per-client payloads; concurrent receivers share
the server bandwidth equally, re-divided whenever one finishes).

Fading and interference are drawn per transmission from the streams
``(seed, "fading"|"interference", direction, client, round)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mecsim.channels import (
    ChannelModel,
    LogDistancePathLoss,
    NoFading,
    broadcast_durations,
    dbm_to_w,
    make_fading,
    processor_sharing_durations,
)
from mecsim.devices import DeviceProfile
from mecsim.distributions import sample_attribute
from mecsim.rng import numpy_rng

if TYPE_CHECKING:
    from mecsim.scenario import LinkConfig, NetworkConfig


@dataclass(frozen=True)
class ClientProfile:
    """A client's static attributes (SI units)."""

    id: int
    distance_m: float
    bandwidth_hz: float
    tx_power_dbm: float
    device: DeviceProfile

    @property
    def tx_power_w(self) -> float:
        return float(dbm_to_w(self.tx_power_dbm))


@dataclass(frozen=True)
class Transfer:
    """One timed transmission to or from one client."""

    client: int
    nbytes: int
    duration_s: float
    rate_bps: float
    snr_db: float


class Network:
    """Times uplink and downlink transfers for a fixed set of clients."""

    def __init__(self, config: NetworkConfig, clients: Sequence[ClientProfile], seed: int) -> None:
        self.config = config
        self.clients = list(clients)
        self.seed = seed
        self.channel = ChannelModel(
            pathloss=LogDistancePathLoss(config.pathloss_db, config.reference_m, config.exponent),
            fading=make_fading(
                config.fading,
                rician_k=config.rician_k,
                shadowing_sigma_db=config.shadowing_sigma_db,
            ),
            noise_psd_dbm_hz=config.noise_psd_dbm_hz,
            spectral_efficiency=config.spectral_efficiency,
        )
        self.random_fading = not isinstance(self.channel.fading, NoFading)
        self.server_bandwidth_hz = config.downlink.bandwidth_mhz * 1e6
        self.server_tx_power_w = dbm_to_w(config.downlink.tx_power_dbm)

    def _interference_w(self, link: LinkConfig, direction: str, client: int, round_: int) -> float:
        if link.interference_w is None and link.interference_dbm is None:
            return 0.0
        rng = numpy_rng(self.seed, "interference", direction, client, round_)
        if link.interference_w is not None:
            value = float(sample_attribute(link.interference_w, rng, 1)[0])
        else:
            value = dbm_to_w(float(sample_attribute(link.interference_dbm, rng, 1)[0]))
        return max(value, 0.0)

    def _fading_gain(self, direction: str, client: int, round_: int) -> float:
        """|g|^2 of one transmission, from the stream (seed, "fading", direction, client, round)."""
        if not self.random_fading:
            return 1.0  # no draw needed: skip creating the stream
        return self.channel.fading.draw(numpy_rng(self.seed, "fading", direction, client, round_))

    def uplink(self, client: int, nbytes: int, round_: int) -> Transfer:
        """Client ``client`` sends ``nbytes`` on its own bandwidth (FDMA)."""
        profile = self.clients[client]
        sample = self.channel.rate_at(
            tx_power_w=profile.tx_power_w,
            distance_m=profile.distance_m,
            bandwidth_hz=profile.bandwidth_hz,
            interference_w=self._interference_w(self.config.uplink, "up", client, round_),
            fading_gain=self._fading_gain("up", client, round_),
        )
        duration = 8 * nbytes / sample.rate_bps if nbytes else 0.0
        return Transfer(client, nbytes, duration, sample.rate_bps, sample.snr_db)

    def downlink(self, nbytes: dict[int, int], round_: int, broadcast: bool) -> dict[int, Transfer]:
        """Server sends ``nbytes[client]`` to each client (one shared payload if ``broadcast``)."""
        clients = sorted(nbytes)
        interference = {
            c: self._interference_w(self.config.downlink, "down", c, round_) for c in clients
        }
        gains = {c: self._fading_gain("down", c, round_) for c in clients}

        def sample(c: int, bandwidth_hz: float):
            return self.channel.rate_at(
                tx_power_w=self.server_tx_power_w,
                distance_m=self.clients[c].distance_m,
                bandwidth_hz=bandwidth_hz,
                interference_w=interference[c],
                fading_gain=gains[c],
            )

        if broadcast:
            full = [sample(c, self.server_bandwidth_hz) for c in clients]
            bits = 8 * (nbytes[clients[0]] if clients else 0)
            durations = broadcast_durations(bits, [s.rate_bps for s in full])
        else:
            full = [sample(c, self.server_bandwidth_hz / len(clients)) for c in clients]
            durations = processor_sharing_durations(
                [8 * nbytes[c] for c in clients],
                lambda i, bw: sample(clients[i], bw).rate_bps,
                self.server_bandwidth_hz,
            )
        return {
            c: Transfer(c, nbytes[c], float(d), s.rate_bps, s.snr_db)
            for c, d, s in zip(clients, np.asarray(durations), full, strict=False)
        }
