"""Transmissions sharing one transmitter over block-fading links (a fluid model).

A transmitter of bandwidth B and power P carries the transmissions active at
a time; each holds an equal share b = B/n of the band and P b/B of the power
(FDMA at constant power spectral density, so nothing creates power or band).
A transmission has one receiver (unicast) or several (broadcast): with
rateless decoding each receiver progresses at its own rate, with a fixed-rate
multicast (``worst``) all progress at the worst receiver's rate. A receiver's
fading gain is redrawn every coherence interval, counted from the start of
its transmission; a block whose SINR is below the outage threshold carries
nothing, and a reception still unfinished ``max_s`` after it started fails.

Rates are constant between change points (a transmission starting or ending,
a receiver finishing, a block boundary, a deadline), so :meth:`advance` steps
from one to the next. The engine is pure: a caller (``mecsim.net.network``) maps
its times onto the event clock and asks :meth:`predict` when the next
reception ends if nothing else starts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mecsim.channels.fading import Fading, NoFading
from mecsim.channels.units import FloatOrArray

RateFn = Callable[[float, float, float], tuple[float, float]]
"""``rate(bandwidth_hz, power_w, fading_gain) -> (rate_bps, sinr_linear)`` of one link."""

_DONE = 1e-9  # a reception with less than this share of its bits left is complete


# --- the fluid model's arithmetic, on floats (the engine) or arrays (bulk rounds) ---------
def send_time(remaining_bits: FloatOrArray, rate_bps: FloatOrArray) -> FloatOrArray:
    """Seconds to receive ``remaining_bits`` at ``rate_bps`` (inf where the rate is 0)."""
    if isinstance(rate_bps, np.ndarray):
        positive = rate_bps > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(positive, remaining_bits / np.where(positive, rate_bps, 1.0), math.inf)
    return remaining_bits / rate_bps if rate_bps > 0 else math.inf


def step_length(t: FloatOrArray, horizon: FloatOrArray) -> FloatOrArray:
    """A step from ``t`` to ``horizon``, never negative."""
    if isinstance(horizon, np.ndarray) or isinstance(t, np.ndarray):
        return np.maximum(horizon - t, 0.0)
    return max(horizon - t, 0.0)


def finish_within(
    t: FloatOrArray, need: FloatOrArray, step: FloatOrArray
) -> tuple[FloatOrArray, FloatOrArray]:
    """(end, seconds on the air) of a reception that needs ``need`` seconds and finishes
    within the step of length ``step`` from ``t``."""
    if isinstance(need, np.ndarray) or isinstance(step, np.ndarray):
        air = np.minimum(need, step)
    else:
        air = min(need, step)
    return t + air, air


def mean_sinr_db(sinr_time: FloatOrArray, duration_s: FloatOrArray) -> FloatOrArray:
    """Time-averaged SINR in dB over a reception: nan if it took no time, -inf with no
    signal (``math.log10`` of each entry for arrays, so both paths agree bit for bit)."""
    if not isinstance(duration_s, np.ndarray):
        if duration_s <= 0:
            return math.nan
        mean = sinr_time / duration_s
        return 10 * math.log10(mean) if mean > 0 else -math.inf
    with np.errstate(over="ignore"):
        means = (sinr_time / np.where(duration_s > 0, duration_s, 1.0)).tolist()
    db = np.array([10 * math.log10(m) if m > 0 else -math.inf for m in means], dtype=float)
    return np.where(duration_s > 0, db, math.nan)


def effective_rate(bits: FloatOrArray, duration_s: FloatOrArray) -> FloatOrArray:
    """Bits received / duration (0 for a reception that took no time)."""
    if not isinstance(duration_s, np.ndarray):
        return bits / duration_s if duration_s > 0 else 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(duration_s > 0, bits / np.where(duration_s > 0, duration_s, 1.0), 0.0)


class FadingTrack:
    """A link's block-fading gains, drawn lazily from one stream: block k's gain is fixed."""

    def __init__(
        self, fading: Fading, rng: np.random.Generator | None, coherence_s: float | None
    ) -> None:
        self.fading = fading
        self.rng = rng
        static = isinstance(fading, NoFading) or rng is None
        self.coherence_s = math.inf if static or not coherence_s else coherence_s
        self._gains: list[float] = []

    def gain(self, block: int) -> float:
        """|g|^2 of block ``block`` (1 without fading)."""
        if self.rng is None or isinstance(self.fading, NoFading):
            return 1.0
        while len(self._gains) <= block:
            self._gains.append(self.fading.draw(self.rng))
        return self._gains[block]


@dataclass(eq=False)
class Reception:
    """One receiver's part of a transmission: bits to receive over its link."""

    client: int
    bits: float
    rate: RateFn
    track: FadingTrack
    max_s: float = math.inf
    min_sinr: float = 0.0
    """Outage threshold (linear): a block whose SINR is below it carries nothing."""
    start: float = 0.0
    remaining: float = field(init=False)
    end: float | None = None
    failed: bool = False
    sinr_time: float = 0.0
    """Integral of the SINR over the reception (its time-average is reported)."""
    block: int = 0
    """Index of the current fading block."""
    band: float = 0.0
    """Its band now, on a shared uplink (:class:`SharedUplink`)."""
    band_time: float = 0.0
    """The integral of its band over its air time, on a shared uplink (Hz s)."""
    bands: list[tuple[float, float]] = field(default_factory=list)
    """On a shared uplink: (when, band in Hz from then on) at each change of its band."""

    def __post_init__(self) -> None:
        self.remaining = float(self.bits)

    @property
    def next_boundary(self) -> float:
        """When the current fading block ends (inf without fading)."""
        return self.start + (self.block + 1) * self.track.coherence_s

    @property
    def deadline(self) -> float:
        return self.start + self.max_s

    @property
    def open(self) -> bool:
        return self.end is None

    @property
    def duration_s(self) -> float:
        return (self.end if self.end is not None else self.start) - self.start

    @property
    def effective_rate_bps(self) -> float:
        """Bits received / duration (0 for a failed or empty reception)."""
        return 0.0 if self.failed else effective_rate(self.bits, self.duration_s)

    @property
    def mean_sinr_db(self) -> float:
        return mean_sinr_db(self.sinr_time, self.duration_s)

    def cut(self, now: float) -> Reception:
        """This open reception cut off at ``now`` (its state advanced to ``now``): a closed
        copy whose ``bits`` are those received so far."""
        assert self.end is None and now >= self.start, "only an open reception is cut off"
        cut = copy.copy(self)
        cut.bits = self.bits - self.remaining
        cut.remaining, cut.end = 0.0, now
        return cut


@dataclass(eq=False)
class Transmission:
    """One transmission: a payload to one receiver or, broadcast, to several."""

    receptions: list[Reception]
    worst: bool = False
    """Fixed-rate multicast at the worst receiver's rate (else rateless decoding)."""
    start: float = 0.0
    energy_j: float = 0.0
    end: float | None = None
    via: SharedTransmitter | None = field(default=None, repr=False)
    """The transmitter it goes out on, when several share a medium."""
    tag: object = field(default=None, repr=False)
    """What the caller knows it by (a transmission a handover starts inherits it)."""

    @property
    def open(self) -> bool:
        return any(r.open for r in self.receptions)

    def begin(self, now: float) -> bool:
        """Start now: its receptions start, empty ones end at once; whether it is open
        (a transmission with nothing to send ends now)."""
        self.start = now
        for r in self.receptions:
            r.start = now
            if r.bits <= 0:
                r.end = now
        if not self.open:
            self.end = now
        return self.open


class SharedTransmitter:
    """The transmissions of one transmitter and the fluid state of their receptions."""

    def __init__(self, bandwidth_hz: float, power_w: float) -> None:
        if bandwidth_hz <= 0 or power_w < 0:
            raise ValueError("a transmitter needs bandwidth > 0 and power >= 0")
        self.bandwidth_hz = bandwidth_hz
        self.power_w = power_w
        self.now = 0.0
        self.active: list[Transmission] = []
        self.twins: dict[int, Reception | Transmission] = {}

    def start(self, transmission: Transmission) -> None:
        """Add a transmission starting now (advance to its start first)."""
        if transmission.begin(self.now):
            self.active.append(transmission)

    def _rates(self) -> list[tuple[Transmission, list[tuple[Reception, float, float]]]]:
        """Per active transmission: (reception, rate, sinr) of each of its open receptions."""
        share = self.bandwidth_hz / len(self.active)
        power = self.power_w / len(self.active)
        out = []
        for tx in self.active:
            rows = []
            for r in tx.receptions:
                if r.open:
                    rate, sinr = r.rate(share, power, r.track.gain(r.block))
                    rows.append((r, rate if sinr >= r.min_sinr else 0.0, sinr))
            if tx.worst and rows:
                lowest = min(rate for _, rate, _ in rows)
                rows = [(r, lowest, sinr) for r, _, sinr in rows]
            out.append((tx, rows))
        return out

    def advance(self, until: float) -> list[Reception]:
        """Move the state to time ``until``; return the receptions that ended (done or failed).

        Each step runs to the next change of the shares or of a rate: a
        transmission ending, a fading block boundary, a deadline, or ``until``.
        Receptions that finish within a step (a broadcast's receivers, each at
        its own rate) end at their exact time without splitting it.
        """
        ended: list[Reception] = []
        while self.active and self.now < until:
            t = self.now
            groups, horizon = self.plan(until)
            if math.isinf(horizon):
                raise PermanentOutage([r.client for _, rows in groups for r, _, _ in rows])
            ended += self.apply(groups, t, step_length(t, horizon))
        if not math.isinf(until):
            self.now = max(self.now, until)
        return ended

    def plan(self, until: float) -> tuple[
        list[tuple[Transmission, list[tuple[Reception, float, float]]]], float
    ]:  # fmt: skip
        """The rates from now and the next change point (at most ``until``): the end of
        the step :meth:`advance` takes (:mod:`~mecsim.channels.fluid` does the same on
        arrays for a medium)."""
        t = self.now
        groups = self._rates()
        horizon = until
        for _, rows in groups:
            finish = t
            for r, rate, _ in rows:
                horizon = min(horizon, r.next_boundary, r.deadline)
                finish = max(finish, t + send_time(r.remaining, rate))
            horizon = min(horizon, finish)
        return groups, horizon

    def apply(
        self,
        groups: list[tuple[Transmission, list[tuple[Reception, float, float]]]],
        t: float,
        step: float,
    ) -> list[Reception]:
        """Advance from ``t`` by ``step`` at the rates of ``groups`` (from :meth:`plan`);
        return the receptions that ended."""
        ended: list[Reception] = []
        share_power = self.power_w / len(self.active)
        self.now = t + step
        tol = 1e-12 * max(1.0, abs(self.now))
        for tx, rows in groups:
            tx.energy_j += share_power * step
            for r, rate, sinr in rows:
                need = send_time(r.remaining, rate)
                if need <= step + tol or r.remaining <= _DONE * r.bits:
                    end, air = finish_within(t, need, step)
                    r.sinr_time += sinr * air
                    r.remaining, r.end = 0.0, end
                    ended.append(r)
                    continue
                r.remaining -= rate * step
                r.sinr_time += sinr * step
                if self.now >= r.deadline - tol:
                    r.end, r.failed = self.now, True
                    ended.append(r)
                elif self.now >= r.next_boundary - tol:
                    r.block += 1
            if not tx.open:
                tx.end = max(r.end for r in tx.receptions if r.end is not None)
        self.active = [tx for tx in self.active if tx.open]
        return ended

    def clone(self) -> SharedTransmitter:
        """A copy whose receptions can advance without touching these; ``clone.twins`` maps
        ``id(reception)`` here to its copy (fading tracks are shared: a block's gain is fixed)."""
        twin = copy.copy(self)
        twin.active = []
        twin.twins = {}
        for tx in self.active:
            copied = copy.copy(tx)
            copied.receptions = [copy.copy(r) for r in tx.receptions]
            for r in copied.receptions:
                r.bands = list(r.bands)  # a forecast's band changes are its own
            twin.twins.update(
                {id(r): c for r, c in zip(tx.receptions, copied.receptions, strict=True)}
            )
            twin.twins[id(tx)] = copied
            twin.active.append(copied)
        return twin

    def predict(self) -> float:
        """When the next open reception ends if no transmission starts (inf if none is open)."""
        if not self.active:
            return math.inf
        ended = self.clone().advance(math.inf)
        return min((r.end for r in ended if r.end is not None), default=math.inf)


class SharedUplink(SharedTransmitter):
    """A cell's uplink band shared by the uploads on the air: each transmission has one
    reception, sent at its client's own power (``powers``), on the band ``split`` gives
    it among the open receptions (re-split at every change point); each reception's
    ``band_time`` accumulates the integral of its band."""

    def __init__(
        self,
        bandwidth_hz: float,
        split: Callable[[list[Reception], float], list[float]],
        powers: dict[int, float],
    ) -> None:
        super().__init__(bandwidth_hz, 0.0)
        self.split = split
        self.powers = powers

    def _rates(self) -> list[tuple[Transmission, list[tuple[Reception, float, float]]]]:
        open_ = [r for tx in self.active for r in tx.receptions if r.open]
        bands = dict(zip(map(id, open_), self.split(open_, self.bandwidth_hz), strict=True))
        out = []
        for tx in self.active:
            rows = []
            for r in tx.receptions:
                if r.open:
                    r.band = bands[id(r)]
                    rate, sinr = (0.0, 0.0) if r.band <= 0 else r.rate(
                        r.band, self.powers[r.client], r.track.gain(r.block)
                    )  # fmt: skip
                    rows.append((r, rate if sinr >= r.min_sinr else 0.0, sinr))
            out.append((tx, rows))
        return out

    def apply(
        self,
        groups: list[tuple[Transmission, list[tuple[Reception, float, float]]]],
        t: float,
        step: float,
    ) -> list[Reception]:
        for _, rows in groups:
            for r, rate, _ in rows:
                need = send_time(r.remaining, rate)
                r.band_time += r.band * min(need, step)
                if not r.bands or r.bands[-1][1] != r.band:
                    r.bands.append((t, r.band))
        return super().apply(groups, t, step)


class PermanentOutage(RuntimeError):
    """Receivers whose SINR stays below the outage threshold with no fading and no deadline."""

    def __init__(self, clients: list[int]) -> None:
        super().__init__(
            f"client(s) {clients[:10]} never leave outage (no fading, SINR below "
            "network.min_snr_db); lower min_snr_db or set network.max_transfer_s"
        )
        self.clients = clients
