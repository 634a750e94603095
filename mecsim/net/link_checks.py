"""Checks a network makes before the run: links in outage, transfers too long to simulate.

:class:`LinkChecks` is a mix-in of :class:`~mecsim.net.network.Network`: it reads the
network's configuration, channel, clients and per-client link constants, and
refuses, with one line naming the setting to change, a scenario whose
transfers could never finish or would take absurdly long.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mecsim.channels import NoFading, db_to_linear, dbm_to_w
from mecsim.channels.link import link_rate
from mecsim.common.errors import ConfigError
from mecsim.common.rng import numpy_rng

if TYPE_CHECKING:
    from mecsim.channels import ChannelModel
    from mecsim.net.network import ClientProfile
    from mecsim.net.settings import LinkConfig, NetworkConfig

MAX_TRANSFER_S = 1e9
"""A transfer that takes longer than this (about 32 years) at its mean rate is a mistake."""
MAX_BLOCKS = 1e6
"""Most fading blocks one transfer may span: each block is one step of the fluid engine."""
RATE_SAMPLE = 1024
"""Fading gains sampled to estimate a link's mean rate before the run."""


class LinkChecks:
    """Pre-run checks of a :class:`~mecsim.net.network.Network`'s links (a mix-in)."""

    config: NetworkConfig
    channel: ChannelModel
    clients: list[ClientProfile]
    seed: int
    position_key: str
    max_s: float
    coherence_s: float
    _gains: np.ndarray | None

    def link_constants(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def outage_sinr(self, link: LinkConfig) -> float:
        """The SINR (linear) below which a fading block of ``link``'s direction carries
        nothing: its own ``min_snr_db``, else ``network.min_snr_db`` (0: none)."""
        db = self.config.min_snr_db if link.min_snr_db is None else link.min_snr_db
        return 0.0 if db is None else db_to_linear(db)

    def _check_outage(self) -> None:
        """Without fading or a deadline, a link below ``min_snr_db`` would never finish: say so
        before the run starts (interference, drawn per transfer, is left out: best case)."""
        if self.config.max_transfer_s is not None:
            return
        fading = not isinstance(self.channel.fading, NoFading)
        const = self.link_constants()
        down_rate, down = self._unit_gain(const["down_bandwidth_hz"], const["down_power_w"])
        up_rate, up = self._unit_gain(const["bandwidth_hz"], const["tx_power_w"])
        sinr = np.minimum(up, down)
        outage = (up < self.outage_sinr(self.config.uplink)) | (
            down < self.outage_sinr(self.config.downlink)
        )
        bad = np.flatnonzero((np.minimum(up_rate, down_rate) <= 0) | (outage & (not fading)))
        if len(bad):  # the first such client
            i = int(bad[0])
            c = self.clients[i]
            if min(up_rate[i], down_rate[i]) <= 0:
                raise ConfigError(
                    self.position_key,
                    f"client {c.id}'s link carries no bits (SINR {sinr[i]:.3g}); "
                    "move clients closer, raise their power or set network.max_transfer_s",
                )
            raise ConfigError(
                "network.min_snr_db",
                f"client {c.id}'s link never leaves outage (SINR {10 * math.log10(up[i]):.1f}"
                f" dB up, {10 * math.log10(down[i]):.1f} dB down, no fading); lower min_snr_db "
                "or set network.max_transfer_s",
            )

    def _unit_gain(
        self, bandwidth_hz: np.ndarray | float, power_w: np.ndarray | float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every client's (rate, SINR) at fading gain 1, no interference."""
        return self._static_rates(self.link_constants()["path_gain"], bandwidth_hz, power_w)

    def _static_rates(
        self,
        path_gain: np.ndarray,
        bandwidth_hz: np.ndarray | float,
        power_w: np.ndarray | float,
        interference_psd_w_hz: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rate, SINR) per link at fading gain 1, no interference power: the engine's
        :func:`~mecsim.channels.link.link_rate` on arrays."""
        noise_psd = float(dbm_to_w(self.config.noise_psd_dbm_hz))
        return link_rate(bandwidth_hz, power_w, 1.0, path_gain, noise_psd,  # type: ignore[return-value]
                         interference_psd_w_hz, 0.0, self.channel.spectral_efficiency)  # fmt: skip

    def _mean_rates(
        self, bandwidth_hz: np.ndarray | float, power_w: np.ndarray | float, min_sinr: float
    ) -> np.ndarray:
        """Every client's :meth:`mean_rate` (numpy without fading)."""
        if isinstance(self.channel.fading, NoFading):
            rate, sinr = self._unit_gain(bandwidth_hz, power_w)
            return np.where(sinr >= min_sinr, rate, 0.0)
        bandwidth = np.broadcast_to(bandwidth_hz, len(self.clients))
        power = np.broadcast_to(power_w, len(self.clients))
        return np.array(
            [
                self.mean_rate(c, b, p, min_sinr)
                for c, b, p in zip(self.clients, bandwidth, power, strict=True)
            ]
        )

    def mean_rate(
        self, client: ClientProfile, bandwidth_hz: float, power_w: float, min_sinr: float
    ) -> float:
        """A link's mean rate over fading blocks, counting blocks below ``min_sinr`` as
        carrying nothing (a fixed sample of :data:`RATE_SAMPLE` gains; interference left
        out: best case)."""
        budget = self.channel.budget(client.distance_m)
        rate, sinr = budget(bandwidth_hz, power_w, 1.0)
        if isinstance(self.channel.fading, NoFading):
            return rate if sinr >= min_sinr else 0.0
        if self._gains is None:
            rng = numpy_rng(self.seed, "fading", "check")
            self._gains = np.array([self.channel.fading.draw(rng) for _ in range(RATE_SAMPLE)])
        sinrs = sinr * self._gains
        if self.channel.spectral_efficiency is not None:
            rates = np.full_like(sinrs, rate)
        else:
            rates = bandwidth_hz * np.log2(1.0 + sinrs)
        return float(np.mean(np.where(sinrs >= min_sinr, rates, 0.0)))

    def check_transfer_times(
        self, nbytes: dict[int, int], what: str, round_s: float | None = None
    ) -> None:
        """Refuse, before the run, transfers of ``nbytes[client]`` that cannot be simulated:
        longer than :data:`MAX_TRANSFER_S` at the link's mean rate (outage included),
        spanning more than :data:`MAX_BLOCKS` fading blocks, in outage in every sampled
        block with no ``max_transfer_s``, or (without fading) failing at every client
        because each outlasts ``network.max_transfer_s``; then deadlines no upload can
        meet (:meth:`_check_deadlines`; ``round_s``: ``protocol.deadline_s``)."""
        fading = not isinstance(self.channel.fading, NoFading)
        const = self.link_constants()
        up = self._mean_rates(
            const["bandwidth_hz"], const["tx_power_w"], self.outage_sinr(self.config.uplink)
        )
        down = self._mean_rates(
            const["down_bandwidth_hz"],
            const["down_power_w"],
            self.outage_sinr(self.config.downlink),
        )
        rate = np.minimum(up, down)
        size = np.zeros(len(self.clients), dtype=np.int64)  # clients are 0..n-1 (link_constants)
        size[list(nbytes)] = list(nbytes.values())
        moves = np.flatnonzero(size)  # the clients that move something, in id order
        rate, size, up = rate[moves], size[moves], up[moves]
        with np.errstate(divide="ignore"):
            seconds = np.where(rate > 0, 8 * size / np.where(rate > 0, rate, 1.0), np.inf)
        blocks = np.minimum(seconds, self.max_s) / self.coherence_s
        problems = np.zeros(len(moves), dtype=bool)
        if self.config.max_transfer_s is None:
            problems |= (rate <= 0) | (seconds > MAX_TRANSFER_S)
        if fading:
            problems |= blocks > MAX_BLOCKS
        if problems.any():  # the first client with a problem, as a loop over clients finds it
            k = int(np.argmax(problems))
            self._refuse_transfer(int(moves[k]), int(size[k]), float(rate[k]), what)
        if not fading and len(seconds) and seconds.min() > self.max_s:
            raise ConfigError(
                "network.max_transfer_s",
                f"every client needs at least {seconds.min():.3g} s to move {what}, longer than "
                f"max_transfer_s = {self.config.max_transfer_s}: every transfer would fail; "
                "raise it or improve the links",
            )
        if len(size):
            with np.errstate(divide="ignore"):
                self._check_deadlines(float((8 * size / up).min()), what, round_s)

    def _check_deadlines(self, fastest: float, what: str, round_s: float | None) -> None:
        """Refuse deadlines no allocation or power can meet: ``fastest``, the shortest of
        the clients' uploads of ``what`` alone on their bands at full power, longer than
        ``network.uplink.power_deadline_s`` (``min_energy``) or the round's ``round_s``
        (``protocol.deadline_s``: no update would ever arrive)."""
        uplink = self.config.uplink
        limits = [("protocol.deadline_s", round_s)]
        if uplink.power == "min_energy":
            limits.append(("network.uplink.power_deadline_s", uplink.power_deadline_s))
        for key, limit in limits:
            if limit is not None and fastest > limit:
                raise ConfigError(
                    key,
                    f"{limit} s is shorter than every client's upload of {what} alone at full "
                    f"power (the fastest takes {fastest:.3g} s): no allocation meets it; give "
                    f"at least {fastest:.3g} s",
                )

    def _refuse_transfer(self, client: int, nbytes: int, rate: float, what: str) -> None:
        """The error of :meth:`check_transfer_times` for ``client``'s first failing check."""
        if rate <= 0 and self.config.max_transfer_s is None:
            raise ConfigError(
                "network.min_snr_db",
                f"client {client}'s link is in outage in all of {RATE_SAMPLE} sampled fading "
                "blocks: its transfers would never finish; lower min_snr_db, move clients "
                "closer or set network.max_transfer_s",
            )
        seconds = 8 * nbytes / rate if rate > 0 else math.inf
        if seconds > MAX_TRANSFER_S and self.config.max_transfer_s is None:
            raise ConfigError(
                self.position_key,
                f"client {client} would need {seconds:.3g} s to move {what} "
                f"({nbytes} bytes) at its mean rate ({rate:.3g} bit/s); move clients "
                "closer, raise their power or bandwidth, or check network.exponent",
            )
        blocks = min(seconds, self.max_s) / self.coherence_s
        raise ConfigError(
            "network.coherence_ms",
            f"client {client}'s transfer of {what} would span {blocks:.3g} fading blocks "
            f"(at most {MAX_BLOCKS:.0e}); raise network.coherence_ms to at least "
            f"{1e3 * min(seconds, self.max_s) / MAX_BLOCKS:.3g} or improve the link",
        )
