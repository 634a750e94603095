"""Client radios, the server's shared transmitter, and the timing of every transfer.

This is the one place a transfer's duration and energy come from; the
simulator asks it and records what it answers. The physics (see docs/design.md,
"Physical layer"):

* **Downlink**: the server has one transmitter (``network.downlink`` bandwidth and
  power). Transmissions active at once share it equally, power in proportion to
  bandwidth (constant PSD), re-divided as they end
  (:class:`~mecsim.channels.sharing.SharedTransmitter`). A broadcast is one transmission
  to many receivers: rateless decoding by default (each at its own rate), or
  ``broadcast_rate = "worst"``. Unicast payloads are one transmission each. Every
  protocol's transmissions (synchronous rounds, asynchronous jobs, the public split) go
  through the same radio; broadcasts of one payload started at one instant are one.
* **Uplink**: FDMA; each client transmits on its own bandwidth at its own power. With
  ``network.uplink.total_bandwidth_mhz`` the cell's band is finite: an upload waits (first
  come, first served) until its bandwidth is free, or, under ``network.uplink.allocation``,
  shares the band with the uploads on the air (:class:`~mecsim.channels.sharing.SharedUplink`);
  ``network.uplink.power`` sets each upload's power within the client's maximum.
* **Fading**: block fading, a new draw every ``network.coherence_ms`` from the
  stream ``(seed, "fading", direction, client, job, attempt)``; below
  ``network.min_snr_db`` a block carries nothing; a transfer unfinished after
  ``network.max_transfer_s`` fails and is retried ``network.retries`` times.
* **Cells**: with several cells (``network.cells``) every cell's radio and every
  client's uplink share one :class:`~mecsim.channels.medium.Medium`: a reception
  hears the co-channel transmitters of other cells while they transmit, and each
  cell broadcasts to the clients associated with it.
* **Energy**: a client's transmit power over its upload; its receive power over its
  download; the server's power over each transmission, split like its band (the sum
  over transmissions is full power x busy time).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from mecsim.channels import ChannelModel, LogDistancePathLoss, dbm_to_w, make_fading
from mecsim.channels.fading import NoFading
from mecsim.channels.medium import Medium, Site
from mecsim.channels.motion import Motion
from mecsim.channels.sharing import (
    FadingTrack,
    PermanentOutage,
    Reception,
    SharedTransmitter,
    SharedUplink,
    Transmission,
)
from mecsim.common.distributions import sample_attribute
from mecsim.common.errors import ConfigError
from mecsim.common.rng import numpy_rng
from mecsim.learning.devices import DeviceProfile
from mecsim.net.closed_form import ClosedForms
from mecsim.net.geometry import Cell, co_channel
from mecsim.net.handover import HandoverSchedule
from mecsim.net.link_checks import LinkChecks
from mecsim.net.mobility import Trajectories
from mecsim.net.radio import Broadcast, Delivery, MediumRadio, Radio
from mecsim.net.settings import NetworkConfig, build_cells
from mecsim.policies.allocation import ALLOCATIONS, Share
from mecsim.policies.power import POWER_CONTROLS, Uplink

if TYPE_CHECKING:
    from mecsim.net.settings import LinkConfig


@dataclass(frozen=True, slots=True)
class ClientProfile:
    """A client's static attributes (SI units)."""

    id: int
    distance_m: float
    """To the client's cell."""
    bandwidth_hz: float
    tx_power_dbm: float
    device: DeviceProfile
    cell: int = 0
    """The cell it is associated with."""
    x_m: float = math.nan
    y_m: float = math.nan
    """Its position (nan when the scenario places clients by distance only)."""

    @property
    def tx_power_w(self) -> float:
        return float(dbm_to_w(self.tx_power_dbm))


def _same(value: Any) -> Any:
    return value


def _db(ratio: float) -> float:
    return 10 * math.log10(ratio) if ratio > 0 else -math.inf


def upload_key(job: int, attempt: int) -> tuple:
    """The key naming an upload's fading and interference streams: its job (a synchronous
    round's number) and its attempt."""
    return ("job", job, attempt)


class Network(ClosedForms, LinkChecks):
    """Times uplink and downlink transfers for a fixed set of clients (see the module docstring)."""

    def __init__(
        self,
        config: NetworkConfig,
        clients: Sequence[ClientProfile],
        seed: int,
        cells: Sequence[Cell] | None = None,
        trajectories: Trajectories | None = None,
        position_key: str = "clients.distance_m",
    ) -> None:
        self.config, self.clients, self.seed = config, list(clients), seed
        self.position_key = position_key  # the setting a link too weak to use names
        self.cells = list(cells or build_cells(config, ""))
        self.channel = ChannelModel(
            pathloss=LogDistancePathLoss(config.pathloss_db, config.reference_m, config.exponent),
            fading=make_fading(
                config.fading,
                rician_k=config.rician_k,
                shadowing_sigma_db=config.shadowing_sigma_db,
            ),  # fmt: skip
            noise_psd_dbm_hz=config.noise_psd_dbm_hz,
            spectral_efficiency=config.spectral_efficiency,
        )
        self._uplink_policies(config.uplink)
        self.server_bandwidth_hz = self.cells[0].bandwidth_hz
        self.server_tx_power_w = self.cells[0].tx_power_w
        self.medium: Medium | None = None
        """With several cells, every transmitter on one :class:`Medium` (interference)."""
        self.coherence_s = config.coherence_ms / 1e3
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
        self.trajectories = trajectories
        self.on_resend: Callable[[Broadcast, Transmission], None] | None = None
        """Hears each downlink transmission a handover starts at a client's new cell."""
        self.handovers: HandoverSchedule | None = None
        """With moving clients: who serves whom when (positions every coherence block)."""
        if trajectories is not None and trajectories.moving:
            self.handovers = HandoverSchedule(
                trajectories,
                self.cells,
                self.channel.pathloss,
                self.coherence_s,
                config.handover_margin_db,
                config.handover_time_to_trigger_s,
                config.handover_interruption_s,
                np.array([c.cell for c in self.clients], dtype=np.int64),
            )
        self._check_outage()

    def _uplink_policies(self, uplink: Any) -> None:
        """Power control and bandwidth allocation of ``[network.uplink]``."""
        self.power_control = POWER_CONTROLS.get(uplink.power)(uplink)
        self.allocation = ALLOCATIONS.get(uplink.allocation)(uplink)
        self.data_sizes: Sequence[int] | None = None  # told by the simulator (proportional)
        self.due = math.inf
        """When this round's uploads are due (the deadline protocol sets it; min_max aims at it)."""

    def bind(self, env: simpy.Environment) -> None:
        """Attach the network to the run's event clock (the simulator calls this)."""
        self.env = env
        self._server: Radio | MediumRadio
        if len(self.cells) > 1 or self.handovers is not None:
            self.medium = self._medium()
            self._server = MediumRadio(env, self.medium)
            self._server.on_resend = self._resent
        else:
            self._server = Radio(
                env, SharedTransmitter(self.server_bandwidth_hz, self.server_tx_power_w)
            )
        hz = None if self.cell_hz is None else round(self.cell_hz)
        self._bands = None if hz is None else [
            simpy.Container(env, capacity=hz, init=hz) for _ in self.cells
        ]  # fmt: skip
        """Each cell's free uplink band, Hz (a finite ``total_bandwidth_mhz``, fcfs)."""
        self._shared: Radio | None = None
        """The cell's band split among the uploads on the air (an allocation policy)."""
        if self.cell_hz is not None and self.allocation.splits:
            self._shared = Radio(env, SharedUplink(self.cell_hz, self._split, {}))
            self._bands = None
        self._open: dict[tuple, Broadcast] = {}
        self._live: dict[tuple, Reception] = {}  # uploads on the medium, by (client, key)

    def _medium(self) -> Medium:
        """Every cell's radio and every client's uplink on one medium (see
        :mod:`mecsim.channels.medium`)."""
        cells, clients, reuse = self.cells, self.clients, self.config.frequency_reuse
        gain = self.channel.pathloss.gain_unchecked  # the medium clamps distances to 1e-9 m
        motion = None
        if self.handovers is not None:
            assert self.trajectories is not None
            motion = Motion(
                self.trajectories.positions,
                self.handovers,
                [(c.x_m, c.y_m) for c in cells],
                self.coherence_s,
                np.array([c.cell for c in clients], dtype=np.int64),
                restart=self.config.handover_transfer == "restart",
                positions_of=self.trajectories.positions_of,
            )

        def receiver(site: Site, reception: Reception) -> tuple[float, float]:
            if site.direction == "up":
                return cells[site.cell].x_m, cells[site.cell].y_m
            if motion is not None:
                return medium.position(reception.client)
            return clients[reception.client].x_m, clients[reception.client].y_m

        from mecsim.channels.event_medium import EventMedium  # numba's compiled loops: cells only

        engine = EventMedium if self.config.medium == "event" else Medium
        medium = engine(
            gain,
            lambda a, b: co_channel(cells[a], cells[b], reuse),
            receiver,
            motion,
            self.channel.pathloss.gain_of_squared,
            self.channel.pathloss.squared_form(),
        )
        self._radios = medium.add_all([
            (SharedTransmitter(c.bandwidth_hz, c.tx_power_w), Site(c.x_m, c.y_m, c.id, "down"))
            for c in cells
        ])  # fmt: skip
        self._uplinks = medium.add_all([
            (SharedTransmitter(c.bandwidth_hz, c.tx_power_w), Site(c.x_m, c.y_m, c.cell, "up", c.id))
            for c in clients
        ])  # fmt: skip
        return medium

    def _resent(self, transmission: Transmission, continued: Transmission) -> None:
        """A handover re-sent the rest of ``continued`` as ``transmission`` from the client's
        new cell: tell :attr:`on_resend` (with the bytes it carries and the cell)."""
        if self.on_resend is not None:
            assert self.medium is not None and transmission.via is not None
            cell = self.medium.sites[id(transmission.via)].cell
            nbytes = int(max(r.remaining for r in transmission.receptions)) // 8
            done = self._server.event_of(transmission)
            self.on_resend(Broadcast(transmission, nbytes, done, cell), continued)

    def cell_of(self, client: int) -> int:
        """The cell serving ``client`` now."""
        if self.handovers is not None and self.env is not None:
            return self.handovers.cell_of(client, self.env.now)
        return self.clients[client].cell

    def sync(self) -> None:
        """Advance the server radio's state to now (its open receptions' bits and energy)."""
        self._server._sync()
        if self.medium is not None:
            self.medium.write_back()

    def server_busy(self) -> bool:
        """Whether a transmission is on the server's radio now (its state advanced to now)."""
        self._server._sync()
        if self.medium is not None:
            return any(self.medium.busy(radio) for radio in self._radios)
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
        fading = self.channel.fading
        static = isinstance(fading, NoFading)  # draws nothing: no stream to seed
        rng = None if static else numpy_rng(self.seed, "fading", direction, client, *key)
        track = FadingTrack(fading, rng, self.coherence_s)
        return Reception(client, 8 * nbytes, budget, track, self.max_s, self.outage_sinr(link))

    def pilot_snr_db(self, client: int, key: tuple) -> tuple[float, float]:
        """What the base station measures of ``client``'s uplink from a pilot at full power
        on its band, now, if the fading holds into its upload under ``key`` (its first
        fading block): the SNR and the SNR without fading, dB (no other transmitter's
        interference: the pilot has its own slot)."""
        reception = self._reception("up", client, 0, key)
        profile = self.clients[client]
        band, power = profile.bandwidth_hz, profile.tx_power_w
        _, faded = reception.rate(band, power, reception.track.gain(0))
        _, mean = reception.rate(band, power, 1.0)
        return _db(faded), _db(mean)

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
        opened = False  # a new broadcast forgets those of other keys (one open at a time)
        for cell, members in self._by_cell(receptions).items():
            via = self._radios[cell] if self.medium is not None else None
            if broadcast:
                size = max(nbytes[c] for c in members)
                joined = self._open.get((join, cell)) if join is not None else None
                if joined is not None and joined.transmission.start == self.env.now:
                    self._server.start([], [(joined.transmission, list(members.values()))])
                    continue
                transmission = Transmission(list(members.values()), worst, via=via)
                self._server.start([transmission])
                joined = Broadcast(transmission, size, self._server.event_of(transmission), cell)
                self._open = self._open if opened else {}
                opened = True
                if join is not None:
                    self._open[(join, cell)] = joined
                started.append(joined)
            else:
                transmissions = {c: Transmission([r], worst, via=via) for c, r in members.items()}
                self._server.start(list(transmissions.values()))
                for c, transmission in transmissions.items():
                    done = self._server.event_of(transmission)
                    started.append(Broadcast(transmission, nbytes[c], done, cell))
        for c, r in receptions.items():  # one transmitter: forecast now; a medium: when asked
            forecast = (
                partial(self._server.forecast, r) if self.medium is not None
                else partial(_same, self._server.forecast(r))
            )  # fmt: skip
            deliveries[c] = Delivery(r, nbytes[c], key, self._server.event_of(r), forecast)  # type: ignore[arg-type]
        return deliveries, started

    def _by_cell(self, receptions: dict[int, Reception]) -> dict[int, dict[int, Reception]]:
        """``receptions`` grouped by the cell whose radio serves them (all in cell 0 with
        one cell), in client order within each cell."""
        if self.medium is None:
            return {0: receptions} if receptions else {}
        groups: dict[int, dict[int, Reception]] = {}
        for c, r in receptions.items():
            groups.setdefault(self.cell_of(c), {})[c] = r
        return dict(sorted(groups.items()))

    # --- uplink -----------------------------------------------------------------------
    def upload(
        self,
        client: int,
        nbytes: int,
        key: tuple,
        on_grant: Callable[[float], None] | None = None,
    ) -> Generator[simpy.Event, Any, tuple[float, Reception]]:
        """Client ``client`` sends ``nbytes`` on its own band (after waiting for spectrum,
        if the cell's band is finite: the cell serving it when it asks grants the band and
        gets it back at the end, even after a handover; ``on_grant`` hears when it got it).
        Returns (when it got the spectrum, its reception)."""
        assert self.env is not None, "Network.bind(env) first"
        if self._shared is not None:  # on the cell's band, split among the uploads on the air
            return (yield from self._shared_upload(client, nbytes, key, on_grant))
        profile = self.clients[client]
        pool = None if self._bands is None else self._bands[self.cell_of(client)]
        if pool is not None:
            yield pool.get(round(profile.bandwidth_hz))  # whole Hz: exact bookkeeping
        granted = self.env.now
        if on_grant is not None:
            on_grant(granted)
        if self.medium is not None:  # on the air with every other transmitter
            ended = yield self.start_upload(client, nbytes, key)
            if pool is not None:
                yield pool.put(round(profile.bandwidth_hz))
            return granted, ended
        reception = self.upload_progress(client, nbytes, key, granted, math.inf)
        assert reception.end is not None
        yield self.env.timeout(reception.end - granted)
        if pool is not None:
            yield pool.put(round(profile.bandwidth_hz))
        return granted, reception

    def start_upload(self, client: int, nbytes: int, key: tuple) -> simpy.Event:
        """Put ``client``'s upload of ``nbytes`` on the medium now, on its own band; return
        the event its reception's end fires (first of all, it stops counting as live)."""
        reception = self._reception("up", client, nbytes, key)
        self._live[(client, key)] = reception
        self._server.start([Transmission([reception], via=self._uplinks[client])])
        ended = self._server.event_of(reception)
        ended.callbacks.append(lambda _: self._live.pop((client, key)))
        return ended

    def unhindered(self) -> bool:
        """Whether every transfer goes on a medium's air at once and is delivered: own uplink
        bands (no shared cell band, no allocation pool), no transfer deadline."""
        return (self.medium is not None and self._shared is None and self._bands is None
                and math.isinf(self.max_s))  # fmt: skip

    def _shared_upload(
        self, client: int, nbytes: int, key: tuple, on_grant: Callable[[float], None] | None
    ) -> Generator[simpy.Event, Any, tuple[float, Reception]]:
        assert self._shared is not None and self.env is not None
        granted = self.env.now
        if on_grant is not None:
            on_grant(granted)
        reception = self._reception("up", client, nbytes, key)
        self._shared.tx.powers[client] = self.upload_power(client, nbytes)  # type: ignore[attr-defined]
        self._live[(client, key)] = reception
        self._shared.start([Transmission([reception])])
        ended = yield self._shared.event_of(reception)
        del self._live[(client, key)]
        return granted, ended

    def _split(self, receptions: list[Reception], total_hz: float) -> list[float]:
        """The allocation policy's bands for the uploads on the air now."""
        powers = self._shared.tx.powers  # type: ignore[union-attr]

        def rate(r: Reception) -> Callable[[float], float]:
            def on(band_hz: float) -> float:
                bps, sinr = r.rate(band_hz, powers[r.client], r.track.gain(r.block))
                return bps if sinr >= r.min_sinr else 0.0

            return on

        sizes = self.data_sizes
        left = self.due - self.env.now  # type: ignore[union-attr]
        shares = [
            Share(r.client, r.remaining, 1.0 if sizes is None else sizes[r.client], rate(r), left)
            for r in receptions
        ]
        return self.allocation.bands(shares, total_hz)

    def upload_power(self, client: int, nbytes: int) -> float:
        """The power ``client`` sends ``nbytes`` at (``network.uplink.power``), from what
        it knows: its maximum, its band, its path gain now, the noise."""
        profile = self.clients[client]
        if self.config.uplink.power == "fixed":
            return profile.tx_power_w
        uplink = Uplink(
            profile.tx_power_w,
            profile.bandwidth_hz,
            float(self.channel.pathloss.gain(profile.distance_m)),
            float(dbm_to_w(self.config.noise_psd_dbm_hz)),
            8.0 * nbytes,
        )
        return self.power_control.power_w(uplink)

    def upload_progress(
        self, client: int, nbytes: int, key: tuple, granted: float, until: float
    ) -> Reception:
        """The upload :meth:`upload` started at ``granted``, as it stands at ``until`` (the
        same seeded fading and interference, so the same bits): open if unfinished. On a
        medium: the upload on the air, as it stands now."""
        if self.medium is not None:
            self.sync()
            return self._live[(client, key)]
        if self._shared is not None:
            self._shared._sync()
            return self._live[(client, key)]
        profile = self.clients[client]
        reception = self._reception("up", client, nbytes, key)
        transmitter = SharedTransmitter(profile.bandwidth_hz, self.upload_power(client, nbytes))
        transmitter.now = granted
        transmitter.start(Transmission([reception]))
        try:
            transmitter.advance(until)
        except PermanentOutage as error:
            raise ConfigError("network.min_snr_db", str(error)) from None
        return reception
