"""The ``[network]`` section: path loss, fading, noise, the rate model, and each link.

These are the settings :class:`mecsim.net.network.Network` reads; they live beside it,
as the protocols' and the fault model's settings live beside theirs. The scenario
(:mod:`mecsim.config.scenario`) composes them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mecsim.channels import dbm_to_w
from mecsim.common.distributions import NumberAttr
from mecsim.common.section import Section
from mecsim.net.geometry import Cell


class LinkConfig(Section):
    """Interference at the receiver, with an explicit unit (default: none).

    ``interference_dbm`` / ``interference_w`` are a power (drawn per transfer);
    ``interference_dbm_hz`` is a power spectral density, so the interference a
    transfer sees scales with the bandwidth it occupies.
    """

    interference_dbm: NumberAttr | None = Field(
        default=None, description="interference power at the receiver, dBm (drawn per transfer)"
    )
    interference_w: NumberAttr | None = Field(
        default=None, description="interference power at the receiver, W (drawn per transfer)"
    )
    interference_dbm_hz: float | None = Field(
        default=None,
        ge=-250,
        le=-50,
        description="interference PSD, dBm/Hz (scales with the bandwidth held)",
    )
    min_snr_db: float | None = Field(
        default=None,
        ge=-100,
        le=100,
        description="outage in this direction: a fading block below this SINR carries "
        "nothing (default: network.min_snr_db)",
    )

    @model_validator(mode="after")
    def _one_unit(self) -> LinkConfig:
        given = [self.interference_dbm, self.interference_w, self.interference_dbm_hz]
        if sum(v is not None for v in given) > 1:
            raise ValueError(
                "set one of interference_dbm, interference_w, interference_dbm_hz, not several"
            )
        return self


class UplinkConfig(LinkConfig):
    """The uplink: clients' transmissions to the server (FDMA), and its interference."""

    total_bandwidth_mhz: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        description="each cell's uplink band; uploads beyond it wait for spectrum, first come "
        "first served (default: unlimited, each client on its own band as KAPC Table 4)",
    )
    allocation: str = Field(
        default="fcfs",
        description="how a finite cell band is shared: fcfs (each upload waits for its own "
        "band), equal, proportional (to data) or min_max (all end together)",
    )
    power: str = Field(
        default="fixed",
        description="power control of each upload: fixed (the client's maximum), "
        "channel_inversion or min_energy (mecsim list power_controls)",
    )
    target_snr_db: float | None = Field(
        default=None, ge=0, le=60, description="channel_inversion: the received SNR it aims at, dB"
    )
    power_deadline_s: float | None = Field(
        default=None, gt=0, le=1e6, description="min_energy: the time an upload may take, s"
    )

    @model_validator(mode="after")
    def _power_settings(self) -> UplinkConfig:
        needs = {"channel_inversion": "target_snr_db", "min_energy": "power_deadline_s"}
        key = needs.get(self.power)
        if key is not None and getattr(self, key) is None:
            raise ValueError(f"power = {self.power!r} needs {key}")
        return self


class DownlinkConfig(LinkConfig):
    """The downlink: the server's transmitter, shared by its sends, and its interference."""

    mode: Literal["broadcast", "unicast"] = Field(
        default="broadcast",
        description="a payload every client gets goes out once (broadcast) or once per client",
    )
    bandwidth_mhz: float = Field(
        default=50.0, gt=0, le=1e5, description="the server transmitter's band, shared by its sends"
    )
    tx_power_dbm: float = Field(
        default=30.0, ge=-50, le=80, description="the server's transmit power, split like its band"
    )
    broadcast_rate: Literal["rateless", "worst"] = Field(
        default="rateless",
        description="'rateless': each receiver decodes at its own rate (ideal); "
        "'worst': a fixed-rate multicast at the worst receiver's rate",
    )


class CellConfig(Section):
    """A cell of ``[[network.cells]]``, numbered 0, 1, ... in order: a base station.

    Each client associates with the cell it receives strongest (see
    :mod:`mecsim.net.geometry`); its edge server runs on ``device``.
    """

    x_m: float = Field(ge=-1e6, le=1e6, description="base station position, m (east)")
    y_m: float = Field(ge=-1e6, le=1e6, description="base station position, m (north)")
    bandwidth_mhz: float | None = Field(
        default=None, gt=0, le=1e5, description="its downlink band (default network.downlink's)"
    )
    tx_power_dbm: float | None = Field(
        default=None, ge=-50, le=80, description="its transmit power (default network.downlink's)"
    )
    device: str | None = Field(
        default=None, description="its edge server's device (default server.device)"
    )


class BackhaulConfig(Section):
    """Each cell's wired link to the cloud server (hierarchical protocols): a dedicated
    link per cell, ``latency + 8 bytes / rate`` a transfer."""

    rate_mbps: float = Field(default=1000.0, gt=0, le=1e7, description="link rate, Mbit/s")
    latency_ms: float = Field(default=5.0, ge=0, le=1e6, description="one-way latency, ms")
    energy_nj_per_bit: float = Field(
        default=0.0, ge=0, le=1e6, description="energy per bit carried, nJ (router and line)"
    )


class MobilityConfig(Section):
    """``[clients.mobility]``: how clients move (see :mod:`mecsim.net.mobility`); positions
    are updated every ``network.coherence_ms``, and path loss and association follow.
    ``clients.mobility = "random_waypoint"`` is short for ``model = "random_waypoint"``."""

    model: Literal["static", "random_waypoint", "gauss_markov", "trace"] = Field(
        default="static", description="static | random_waypoint | gauss_markov | trace (CSV)"
    )
    speed_mps: float | tuple[float, float] = Field(
        default=(0.5, 1.5),
        description="speed, m/s: a number or [min, max] (pedestrian ~1, vehicular ~10-30)",
    )
    pause_s: float = Field(
        default=0.0, ge=0, le=1e6, description="random_waypoint: pause at each waypoint, s"
    )
    area_m: tuple[float, float, float, float] | None = Field(
        default=None,
        description="[x_min, y_min, x_max, y_max], m: where clients roam (default: the "
        "smallest rectangle holding the cells and the clients' starting positions)",
    )
    memory: float = Field(
        default=0.75,
        ge=0,
        le=1,
        description="gauss_markov: memory a, dimensionless (0 random walk, 1 straight)",
    )
    step_s: float = Field(
        default=1.0, ge=0.01, le=1e6, description="gauss_markov: seconds between updates of "
        "speed and direction (at least 0.01: positions are sampled per coherence block)",
    )  # fmt: skip
    trace: str | None = Field(
        default=None,
        description="trace: CSV with columns t, client, x, y (s, id, m, m), linearly "
        "interpolated (a relative path is read from the scenario file's folder)",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        return {"model": value} if isinstance(value, str) else value

    @property
    def speed_range(self) -> tuple[float, float]:
        """(min, max) speed, m/s."""
        s = self.speed_mps
        return (float(s), float(s)) if isinstance(s, int | float) else (float(s[0]), float(s[1]))

    @model_validator(mode="after")
    def _sane(self) -> MobilityConfig:
        low, high = self.speed_range
        if not 0 <= low <= high <= 1e4:
            raise ValueError(f"speed_mps must be 0 <= min <= max <= 1e4 m/s, got {self.speed_mps}")
        if self.model == "random_waypoint" and low <= 0:
            raise ValueError(
                "random_waypoint needs speeds above 0 (a zero speed never arrives): raise "
                "the minimum of speed_mps"
            )
        if self.area_m is not None:
            x0, y0, x1, y1 = self.area_m
            if not (x0 < x1 and y0 < y1):
                raise ValueError(f"area_m = {list(self.area_m)} needs x_min < x_max, y_min < y_max")
            if min(x1 - x0, y1 - y0) < 1.0:  # legs of nanometres: endless work, no motion
                raise ValueError(f"area_m = {list(self.area_m)}: make each side at least 1 m")
        if (self.model == "trace") != (self.trace is not None):
            raise ValueError(
                "model = 'trace' needs trace = 'file.csv'" if self.trace is None
                else "trace is read only with model = 'trace'; set model = 'trace' or drop it"
            )  # fmt: skip
        if self.trace is not None:
            from mecsim.net.mobility import read_trace

            read_trace(self.trace)  # a ValueError names the file, the row and the column
        return self


class NetworkConfig(Section):
    """Path loss, fading, noise and rate model (defaults: KAPC Table 4).

    ``preset = "table5"`` fixes the spectral efficiency at 1 bit/s/Hz, the only
    reading that reproduces KAPC Table 5's times (see docs/design.md, "Physical layer").
    """

    preset: Literal["physical", "table5"] = Field(
        default="physical",
        description="'physical': Shannon rates; 'table5': 1 bit/s/Hz, as KAPC Table 5's times",
    )
    pathloss_db: float = Field(default=-40.0, ge=-200, le=0, description="gain at reference_m, dB")
    reference_m: float = Field(
        default=1.0, gt=0, le=1e4, description="reference distance of the path-loss model, m"
    )
    exponent: float = Field(
        default=4.0, gt=0, le=10, description="path-loss exponent (dimensionless)"
    )
    noise_psd_dbm_hz: float = Field(
        default=-174.0, ge=-230, le=-100, description="thermal noise PSD, dBm/Hz"
    )
    fading: str = Field(default="none", description="small-scale fading model (mecsim list fading)")
    rician_k: float = Field(
        default=3.0, ge=0, le=1e4, description="rician fading: K factor (linear)"
    )
    shadowing_sigma_db: float = Field(
        default=8.0, ge=0, le=50, description="lognormal fading: shadowing sigma, dB"
    )
    spectral_efficiency: float | None = Field(default=None, gt=0, le=100, description="bit/s/Hz")
    coherence_ms: float = Field(
        default=10.0,
        ge=0.01,
        le=1e7,
        description="block fading: a new fading draw every this many ms (at least 0.01)",
    )
    min_snr_db: float | None = Field(
        default=None,
        ge=-100,
        le=100,
        description="outage: a fading block below this SINR carries nothing",
    )
    max_transfer_s: float | None = Field(
        default=None, gt=0, le=1e9, description="a transfer unfinished after this long fails"
    )
    retries: int = Field(default=0, ge=0, le=100, description="attempts after a failed transfer")
    uplink: UplinkConfig = Field(default_factory=UplinkConfig)
    downlink: DownlinkConfig = Field(default_factory=DownlinkConfig)
    cells: list[CellConfig] = Field(
        default_factory=list,
        description="[[network.cells]]: base stations with edge servers (default: one cell, "
        "clients at clients.distance_m); needs client positions (clients.x_m, clients.y_m)",
    )
    backhaul: BackhaulConfig = Field(default_factory=BackhaulConfig)
    frequency_reuse: int = Field(
        default=1,
        ge=1,
        le=64,
        description="reuse factor K: cells i and j share a channel (and interfere) when "
        "i mod K = j mod K; 1: every cell co-channel",
    )

    handover_margin_db: float = Field(
        default=3.0,
        ge=0,
        le=50,
        description="hand over when another cell is received this much stronger (mean power)",
    )
    handover_time_to_trigger_s: float = Field(
        default=0.1,
        ge=0,
        le=1e4,
        description="time-to-trigger: the margin must hold this long before a handover, s",
    )
    handover_interruption_s: float = Field(
        default=0.05, ge=0, le=1e4, description="a handover's break: the client sends and "
        "receives nothing for this long",
    )  # fmt: skip
    handover_transfer: Literal["resume", "restart"] = Field(
        default="resume",
        description="a transfer under way at a handover resumes at the new cell with the "
        "bytes delivered kept, or restarts",
    )
    medium: Literal["event", "stepping"] = Field(
        default="event",
        description="with several cells, how the shared medium is integrated: 'event' "
        "brings each transfer up to date only when it may end (fast with many clients on "
        "the air), 'stepping' steps every transfer at every change point (the reference); "
        "the same physics, tables equal to rounding",
    )

    @model_validator(mode="after")
    def _preset(self) -> NetworkConfig:
        if self.preset == "table5" and self.spectral_efficiency is None:
            self.spectral_efficiency = 1.0
        return self


def build_cells(cfg: NetworkConfig, server_device: str) -> list[Cell]:
    """The cells of ``[[network.cells]]`` (unset keys from ``[network.downlink]`` and
    ``server.device``), or the one cell at the origin every scenario without them has."""
    down = cfg.downlink
    given = cfg.cells or [CellConfig(x_m=0.0, y_m=0.0)]
    return [
        Cell(
            id=i,
            x_m=c.x_m,
            y_m=c.y_m,
            bandwidth_hz=(down.bandwidth_mhz if c.bandwidth_mhz is None else c.bandwidth_mhz) * 1e6,
            tx_power_w=float(dbm_to_w(down.tx_power_dbm if c.tx_power_dbm is None else c.tx_power_dbm)),
            device=server_device if c.device is None else c.device,
        )
        for i, c in enumerate(given)
    ]  # fmt: skip
