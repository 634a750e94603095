"""Client radios, the server's shared transmitter, and the timing of every transfer.

This is the one place a transfer's duration and energy come from; the
simulator asks it and records what it answers. The physics (see docs/design.md,
"Physical layer"):

* **Downlink**: the server has one transmitter (``network.downlink``
  bandwidth and power). Transmissions active at once share it equally, power
  in proportion to bandwidth (constant PSD), re-divided as they end
  (:class:`~mecsim.channels.sharing.SharedTransmitter`). A broadcast is one
  transmission to many receivers: rateless decoding by default (each at its
  own rate), or ``broadcast_rate = "worst"``. Unicast payloads are one
  transmission each. Transmissions every protocol starts (synchronous
  rounds, asynchronous jobs, the public split) go through the same radio;
  broadcasts of the same payload started at the same instant are one.
* **Uplink**: FDMA; each client transmits on its own bandwidth at its own
  power. With ``network.uplink.total_bandwidth_mhz`` the cell's band is
  finite: an upload waits (first come, first served) until its bandwidth is free.
* **Fading**: block fading, a new draw every ``network.coherence_ms`` from the
  stream ``(seed, "fading", direction, client, job, attempt)``; below
  ``network.min_snr_db`` a block carries nothing; a transfer unfinished after
  ``network.max_transfer_s`` fails and is retried ``network.retries`` times.
* **Energy**: a client's transmit power over its upload; its receive power
  over its download; the server's power over each transmission, split like
  its band (the sum over transmissions is full power x busy time).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from mecsim.channels import (
    ChannelModel,
    LogDistancePathLoss,
    NoFading,
    dbm_to_w,
    make_fading,
)
from mecsim.channels.link import link_rate
from mecsim.channels.sharing import (
    FadingTrack,
    PermanentOutage,
    Reception,
    SharedTransmitter,
    Transmission,
    finish_within,
    send_time,
    step_length,
)
from mecsim.devices import DeviceProfile
from mecsim.distributions import sample_attribute
from mecsim.errors import ConfigError
from mecsim.radio import Broadcast, ClosedForm, Delivery, Radio
from mecsim.rng import numpy_rng

if TYPE_CHECKING:
    from mecsim.network_config import LinkConfig, NetworkConfig


@dataclass(frozen=True, slots=True)
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


MAX_TRANSFER_S = 1e9
"""A transfer that takes longer than this (about 32 years) at its mean rate is a mistake."""
MAX_BLOCKS = 1e6
"""Most fading blocks one transfer may span: each block is one step of the fluid engine."""
RATE_SAMPLE = 1024
"""Fading gains sampled to estimate a link's mean rate before the run."""


class Network:
    """Times uplink and downlink transfers for a fixed set of clients (see the module docstring)."""

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
        self.server_bandwidth_hz = config.downlink.bandwidth_mhz * 1e6
        self.server_tx_power_w = dbm_to_w(config.downlink.tx_power_dbm)
        self.coherence_s = config.coherence_ms / 1e3
        self.min_sinr = 0.0 if config.min_snr_db is None else 10 ** (config.min_snr_db / 10)
        self.max_s = config.max_transfer_s or math.inf
        cell = config.uplink.total_bandwidth_mhz
        self.cell_hz = None if cell is None else cell * 1e6
        if self.cell_hz is not None:
            widest = max((c.bandwidth_hz for c in self.clients), default=0.0)
            if widest > self.cell_hz:
                raise ConfigError(
                    "network.uplink.total_bandwidth_mhz",
                    f"{cell} MHz is narrower than a client's {widest / 1e6:.3g} MHz uplink; "
                    "widen the cell or narrow clients.bandwidth_mhz",
                )
        self.env: simpy.Environment | None = None
        self._gains: np.ndarray | None = None
        self._constants: dict[str, np.ndarray] | None = None
        self._check_outage()

    def _check_outage(self) -> None:
        """Without fading or a deadline, a link below ``min_snr_db`` would never finish: say so
        before the run starts (interference, drawn per transfer, is left out: best case)."""
        if self.config.max_transfer_s is not None:
            return
        fading = not isinstance(self.channel.fading, NoFading)
        const = self.link_constants()
        down_rate, down = self._unit_gain(self.server_bandwidth_hz, self.server_tx_power_w)
        up_rate, up = self._unit_gain(const["bandwidth_hz"], const["tx_power_w"])
        sinr = np.minimum(up, down)
        bad = np.flatnonzero(
            (np.minimum(up_rate, down_rate) <= 0) | (~fading & (sinr < self.min_sinr))
        )
        if len(bad):  # the first such client
            i = int(bad[0])
            c = self.clients[i]
            if min(up_rate[i], down_rate[i]) <= 0:
                raise ConfigError(
                    "clients.distance_m",
                    f"client {c.id}'s link carries no bits (SINR {sinr[i]:.3g}); "
                    "move clients closer, raise their power or set network.max_transfer_s",
                )
            raise ConfigError(
                "network.min_snr_db",
                f"client {c.id}'s link never leaves outage ({10 * math.log10(sinr[i]):.1f}"
                f" dB < {self.config.min_snr_db} dB, no fading); lower min_snr_db or set "
                "network.max_transfer_s",
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
        self, bandwidth_hz: np.ndarray | float, power_w: np.ndarray | float
    ) -> np.ndarray:
        """Every client's :meth:`mean_rate` (numpy without fading)."""
        if isinstance(self.channel.fading, NoFading):
            rate, sinr = self._unit_gain(bandwidth_hz, power_w)
            return np.where(sinr >= self.min_sinr, rate, 0.0)
        bandwidth = np.broadcast_to(bandwidth_hz, len(self.clients))
        power = np.broadcast_to(power_w, len(self.clients))
        return np.array(
            [
                self.mean_rate(c, b, p)
                for c, b, p in zip(self.clients, bandwidth, power, strict=True)
            ]
        )

    def mean_rate(self, client: ClientProfile, bandwidth_hz: float, power_w: float) -> float:
        """A link's mean rate over fading blocks, counting outage blocks as carrying nothing
        (a fixed sample of :data:`RATE_SAMPLE` gains; interference left out: best case)."""
        budget = self.channel.budget(client.distance_m)
        rate, sinr = budget(bandwidth_hz, power_w, 1.0)
        if isinstance(self.channel.fading, NoFading):
            return rate if sinr >= self.min_sinr else 0.0
        if self._gains is None:
            rng = numpy_rng(self.seed, "fading", "check")
            self._gains = np.array([self.channel.fading.draw(rng) for _ in range(RATE_SAMPLE)])
        sinrs = sinr * self._gains
        if self.channel.spectral_efficiency is not None:
            rates = np.full_like(sinrs, rate)
        else:
            rates = bandwidth_hz * np.log2(1.0 + sinrs)
        return float(np.mean(np.where(sinrs >= self.min_sinr, rates, 0.0)))

    def check_transfer_times(self, nbytes: dict[int, int], what: str) -> None:
        """Refuse, before the run, transfers of ``nbytes[client]`` that cannot be simulated:
        longer than :data:`MAX_TRANSFER_S` at the link's mean rate (outage included),
        spanning more than :data:`MAX_BLOCKS` fading blocks, in outage in every sampled
        block with no ``max_transfer_s``, or (without fading) failing at every client
        because each outlasts ``network.max_transfer_s``."""
        fading = not isinstance(self.channel.fading, NoFading)
        const = self.link_constants()
        rate = np.minimum(
            self._mean_rates(const["bandwidth_hz"], const["tx_power_w"]),
            self._mean_rates(self.server_bandwidth_hz, self.server_tx_power_w),
        )
        size = np.zeros(len(self.clients), dtype=np.int64)  # clients are 0..n-1 (link_constants)
        size[list(nbytes)] = list(nbytes.values())
        moves = np.flatnonzero(size)  # the clients that move something, in id order
        rate, size = rate[moves], size[moves]
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
                "clients.distance_m",
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

    def bind(self, env: simpy.Environment) -> None:
        """Attach the network to the run's event clock (the simulator calls this)."""
        self.env = env
        self._server = Radio(
            env, SharedTransmitter(self.server_bandwidth_hz, self.server_tx_power_w)
        )
        self._cell = (
            None
            if self.cell_hz is None
            else simpy.Container(env, capacity=round(self.cell_hz), init=round(self.cell_hz))
        )
        self._open: dict[tuple, Broadcast] = {}

    # --- closed forms (bulk rounds) ------------------------------------------------------
    def closed_form_blocker(self) -> str | None:
        """Why a transfer's timing needs the event-driven engine, or None when every transfer
        alone on its link has a closed form: no fading, no deadline (so no failure or retry),
        no interference drawn per transfer, and a per-client uplink band (no waiting)."""
        if not isinstance(self.channel.fading, NoFading):
            return "fading"
        if self.config.max_transfer_s is not None:
            return "network.max_transfer_s"
        if self.cell_hz is not None:
            return "network.uplink.total_bandwidth_mhz"
        for link in (self.config.uplink, self.config.downlink):
            if link.interference_w is not None or link.interference_dbm is not None:
                return "interference drawn per transfer"
        return None

    def link_constants(self) -> dict[str, np.ndarray]:
        """Per client (by id): path gain, uplink bandwidth and power, each computed by the
        scalar code the engine runs, so closed forms reproduce it bit for bit."""
        if self._constants is None:
            assert all(c.id == i for i, c in enumerate(self.clients)), "clients are 0..n-1"
            gain = self.channel.pathloss.gain  # as ChannelModel.budget computes it
            self._constants = {
                "path_gain": np.array([float(gain(c.distance_m)) for c in self.clients]),
                "bandwidth_hz": np.array([float(c.bandwidth_hz) for c in self.clients]),
                "tx_power_w": np.array([c.tx_power_w for c in self.clients]),
            }
        return self._constants

    def _closed_form(
        self,
        link: LinkConfig,
        clients: np.ndarray,
        bits: np.ndarray,
        start: np.ndarray | float,
        bandwidth_hz: np.ndarray | float,
        power_w: np.ndarray | float,
        broadcast: bool = False,
        worst: bool = False,
    ) -> ClosedForm | None:
        """Receptions of transmissions each alone on its transmitter from ``start`` (or, with
        ``broadcast``, one transmission to all): :meth:`SharedTransmitter.advance`'s single
        step in numpy, operation for operation (alone, a transmission's share of the band
        and power, ``B / 1`` and ``P / 1``, is ``B`` and ``P`` exactly). None if a link is in
        outage."""
        psd = link.interference_dbm_hz
        interference_psd = 0.0 if psd is None else float(dbm_to_w(psd))
        path_gain = self.link_constants()["path_gain"][clients]
        rate, sinr = self._static_rates(path_gain, bandwidth_hz, power_w, interference_psd)
        if np.any(sinr < self.min_sinr):
            return None
        if worst and len(rate):
            rate = np.full_like(sinr, rate.min())
        if np.any(rate <= 0):
            return None
        need = send_time(bits.astype(float), rate)
        start = np.broadcast_to(np.asarray(start, dtype=float), need.shape)
        # one step to the last finish; a broadcast's receivers share the step
        finish = np.maximum(start, start + need)
        if broadcast:
            finish = np.full_like(finish, finish.max(initial=-math.inf))
        step = step_length(start, finish)
        end, air = finish_within(start, need, step)
        return ClosedForm(clients, bits, start.copy(), end, sinr * air, step)

    def closed_form_broadcast(
        self, clients: Sequence[int], nbytes: int, start: float
    ) -> ClosedForm | None:
        """A lone broadcast of ``nbytes`` from the idle server radio to ``clients`` at
        ``start`` (see :meth:`closed_form_blocker`); None if a link is in outage."""
        ids = np.asarray(clients, dtype=np.int64)
        bits = np.full(len(ids), 8 * nbytes, dtype=np.int64)
        worst = self.config.downlink.broadcast_rate == "worst"
        return self._closed_form(
            self.config.downlink,
            ids,
            bits,
            float(start),
            self.server_bandwidth_hz,
            self.server_tx_power_w,
            broadcast=True,
            worst=worst,
        )

    def closed_form_uploads(
        self, clients: np.ndarray, nbytes: np.ndarray, start: np.ndarray
    ) -> ClosedForm | None:
        """Each client's upload of ``nbytes`` on its own band from ``start`` (see
        :meth:`closed_form_blocker`); None if a link is in outage."""
        const = self.link_constants()
        return self._closed_form(
            self.config.uplink,
            clients,
            8 * nbytes,
            start,
            const["bandwidth_hz"][clients],
            const["tx_power_w"][clients],
        )

    def sync(self) -> None:
        """Advance the server radio's state to now (its open receptions' bits and energy)."""
        self._server._sync()

    def server_busy(self) -> bool:
        """Whether a transmission is on the server's radio now (its state advanced to now)."""
        self._server._sync()
        return bool(self._server.tx.active)

    # --- link budgets ------------------------------------------------------------------
    def _interference(self, link: LinkConfig, direction: str, client: int, key: tuple) -> float:
        if link.interference_w is None and link.interference_dbm is None:
            return 0.0
        rng = numpy_rng(self.seed, "interference", direction, client, *key)
        if link.interference_w is not None:
            value = float(sample_attribute(link.interference_w, rng, 1)[0])
        else:
            value = dbm_to_w(float(sample_attribute(link.interference_dbm, rng, 1)[0]))
        return max(value, 0.0)

    def _reception(self, direction: str, client: int, nbytes: int, key: tuple) -> Reception:
        link = self.config.uplink if direction == "up" else self.config.downlink
        psd = link.interference_dbm_hz
        budget = self.channel.budget(
            self.clients[client].distance_m,
            interference_w=self._interference(link, direction, client, key),
            interference_psd_w_hz=0.0 if psd is None else float(dbm_to_w(psd)),
        )
        track = FadingTrack(
            self.channel.fading,
            numpy_rng(self.seed, "fading", direction, client, *key),
            self.coherence_s,
        )
        return Reception(client, 8 * nbytes, budget, track, self.max_s, self.min_sinr)

    # --- downlink ---------------------------------------------------------------------
    def downlink(
        self, nbytes: dict[int, int], key: tuple, broadcast: bool, join: object = None
    ) -> tuple[dict[int, Delivery], list[Broadcast]]:
        """Start the server's transmission(s) of ``nbytes[client]`` to each client, now.

        ``broadcast``: one payload to all (one transmission; a later call with
        the same ``join`` key at the same instant adds its receivers to it);
        else one transmission per client. ``key`` names the fading streams. Returns each client's :class:`Delivery` and
        the transmissions started (their ``done`` events end the server's airtime).
        """
        assert self.env is not None, "Network.bind(env) first"
        worst = self.config.downlink.broadcast_rate == "worst"
        deliveries: dict[int, Delivery] = {}
        started: list[Broadcast] = []
        receptions = {
            c: self._reception("down", c, n, key) for c, n in sorted(nbytes.items()) if n > 0
        }
        if broadcast and receptions:
            size = max(nbytes.values())
            joined = self._open.get(join) if join is not None else None
            if joined is not None and joined.transmission.start == self.env.now:
                self._server.start([], [(joined.transmission, list(receptions.values()))])
            else:
                transmission = Transmission(list(receptions.values()), worst)
                self._server.start([transmission])
                joined = Broadcast(transmission, size, self._server.event_of(transmission))
                self._open = {join: joined} if join is not None else {}
                started.append(joined)
        elif receptions:
            transmissions = {c: Transmission([r], worst) for c, r in receptions.items()}
            self._server.start(list(transmissions.values()))
            for c, transmission in transmissions.items():
                done = self._server.event_of(transmission)
                started.append(Broadcast(transmission, nbytes[c], done))
        for c, r in receptions.items():
            forecast = self._server.forecast(r)
            end = forecast.end if forecast.end is not None else math.inf
            event = self._server.event_of(r)
            deliveries[c] = Delivery(r, nbytes[c], key, event, end, forecast.failed)
        return deliveries, started

    # --- uplink -----------------------------------------------------------------------
    def upload(
        self,
        client: int,
        nbytes: int,
        key: tuple,
        on_grant: Callable[[float], None] | None = None,
    ) -> Generator[simpy.Event, Any, tuple[float, Reception]]:
        """Client ``client`` sends ``nbytes`` on its own band (after waiting for spectrum,
        if the cell's band is finite; ``on_grant`` hears when it got it). Returns (when it
        got the spectrum, its reception)."""
        assert self.env is not None, "Network.bind(env) first"
        profile = self.clients[client]
        if self._cell is not None:
            yield self._cell.get(round(profile.bandwidth_hz))  # whole Hz: exact bookkeeping
        granted = self.env.now
        if on_grant is not None:
            on_grant(granted)
        reception = self.upload_progress(client, nbytes, key, granted, math.inf)
        assert reception.end is not None
        yield self.env.timeout(reception.end - granted)
        if self._cell is not None:
            yield self._cell.put(round(profile.bandwidth_hz))
        return granted, reception

    def upload_progress(
        self, client: int, nbytes: int, key: tuple, granted: float, until: float
    ) -> Reception:
        """The upload :meth:`upload` started at ``granted``, as it stands at ``until`` (the
        same seeded fading and interference, so the same bits): open if unfinished."""
        profile = self.clients[client]
        reception = self._reception("up", client, nbytes, key)
        transmitter = SharedTransmitter(profile.bandwidth_hz, profile.tx_power_w)
        transmitter.now = granted
        transmitter.start(Transmission([reception]))
        try:
            transmitter.advance(until)
        except PermanentOutage as error:
            raise ConfigError("network.min_snr_db", str(error)) from None
        return reception
