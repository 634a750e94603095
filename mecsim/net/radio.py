"""The server's radio on the event clock, and what a transfer hands the simulator.

:class:`Radio` maps a :class:`~mecsim.channels.sharing.SharedTransmitter` onto
SimPy events (a reception's or a transmission's end, re-forecast whenever a
transmission starts or ends); :class:`Delivery`, :class:`Broadcast` and
:class:`ClosedForm` are what :class:`~mecsim.net.network.Network` returns for a
download, a downlink transmission and a bulk round's receptions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy
from simpy.core import URGENT

from mecsim.channels.sharing import (
    PermanentOutage,
    Reception,
    SharedTransmitter,
    Transmission,
    effective_rate,
    mean_sinr_db,
)
from mecsim.common.errors import ConfigError


@dataclass
class Delivery:
    """One receiver's reception of a downlink transmission, as the event clock sees it."""

    reception: Reception
    nbytes: int
    key: tuple
    """The transmission's fading-stream key (retries extend it)."""
    done: simpy.Event
    """Succeeds (with the reception) when the reception ends, delivered or failed."""
    forecast: Callable[[], Reception]
    """How the reception ends if no other transmission starts meanwhile (asked lazily)."""

    @property
    def client(self) -> int:
        return self.reception.client

    @property
    def predicted_end(self) -> float:
        """When it ends if no other transmission starts meanwhile."""
        end = self.forecast().end
        return math.inf if end is None else end

    @property
    def predicted_failure(self) -> bool:
        return self.forecast().failed


@dataclass
class Broadcast:
    """A downlink transmission and the event that succeeds when it ends."""

    transmission: Transmission
    nbytes: int
    done: simpy.Event
    cell: int = 0
    """The cell whose radio sends it."""


@dataclass
class ClosedForm:
    """Receptions computed in closed form (numpy), one per client, aligned by position."""

    clients: np.ndarray
    bits: np.ndarray
    start: np.ndarray
    end: np.ndarray
    sinr_time: np.ndarray
    """Integral of the SINR over each reception."""
    step: np.ndarray
    """The transmitter's busy time from ``start`` (a broadcast's is its longest reception)."""

    @property
    def duration_s(self) -> np.ndarray:
        return self.end - self.start

    @property
    def effective_rate_bps(self) -> np.ndarray:
        """Bits / duration, as :attr:`Reception.effective_rate_bps` (0 for an empty one)."""
        return effective_rate(self.bits, self.duration_s)  # type: ignore[return-value]

    @property
    def mean_sinr_db(self) -> np.ndarray:
        """As :attr:`Reception.mean_sinr_db`: nan for an empty reception, -inf for no signal."""
        return mean_sinr_db(self.sinr_time, self.duration_s)  # type: ignore[return-value]


class _Events:
    """The SimPy event of each watched reception and transmission, fired once."""

    env: simpy.Environment

    def __init__(self) -> None:
        self._pending: dict[int, tuple[Reception | Transmission, simpy.Event]] = {}
        self._order: dict[int, int] = {}  # watch order: ties in time fire in it
        self._fired: dict[int, simpy.Event] = {}

    def event_of(self, obj: Reception | Transmission) -> simpy.Event:
        return self._pending[id(obj)][1] if id(obj) in self._pending else self._fired[id(obj)]

    def _watch(self, obj: Reception | Transmission) -> None:
        self._pending[id(obj)] = (obj, self.env.event())
        self._order[id(obj)] = len(self._order)

    def _fire(
        self, obj: Reception | Transmission, value: Reception | Transmission | None = None
    ) -> None:
        _, event = self._pending.pop(id(obj))
        self._order.pop(id(obj), None)
        self._fired[id(obj)] = event
        event.succeed(obj if value is None else value)


class Radio(_Events):
    """Maps a :class:`SharedTransmitter` onto the event clock.

    ``self.tx`` holds the state as of the last transmission start. A start
    first advances it to now, then forecasts the rest (a copy advanced until
    everything ends, exact while nothing else starts) and fires each
    reception's and transmission's event at its forecast end, with the
    forecast copy as the event's value. A later start cancels what is left of
    the forecast and makes a new one.
    """

    def __init__(self, env: simpy.Environment, transmitter: SharedTransmitter) -> None:
        super().__init__()
        self.env = env
        self.tx = transmitter
        self._forecast: dict[int, Reception | Transmission] = {}
        self._generation = 0

    def start(
        self,
        transmissions: Sequence[Transmission],
        joins: Sequence[tuple[Transmission, Sequence[Reception]]] = (),
    ) -> None:
        """Start ``transmissions`` now and add ``joins`` receivers to transmissions that
        started at this instant; then forecast their ends."""
        self._sync()
        for transmission in transmissions:
            self.tx.start(transmission)
            self._watch(transmission)
            for r in transmission.receptions:
                self._watch(r)
        for transmission, receptions in joins:
            for r in receptions:
                r.start = self.tx.now
                transmission.receptions.append(r)
                self._watch(r)
        for obj, _ in list(self._pending.values()):  # empty payloads end at once
            if not obj.open:
                self._fire(obj, obj)
        self._schedule()

    def forecast(self, obj: Reception | Transmission) -> Reception | Transmission:
        """How ``obj`` ends if nothing else starts (itself if it has ended)."""
        return self._forecast.get(id(obj), obj)

    def _sync(self) -> None:
        """Advance the state to now; fire what ended and was not yet fired from a forecast."""
        self._fired = {}
        for r in self.tx.advance(self.env.now):
            if id(r) in self._pending:
                self._fire(r, r)
        for obj, _ in list(self._pending.values()):
            if isinstance(obj, Transmission) and not obj.open:
                self._fire(obj, obj)

    def _schedule(self) -> None:
        self._generation += 1
        clone = self.tx.clone()
        try:
            clone.advance(math.inf)
        except PermanentOutage as error:
            raise ConfigError("network.min_snr_db", str(error)) from None
        self._forecast = clone.twins
        timeline = sorted(
            (twin.end, self._order[id(obj)], id(obj))
            for obj, _ in self._pending.values()
            if (twin := clone.twins.get(id(obj))) is not None and twin.end is not None
        )
        if timeline:
            self.env.process(self._deliver(self._generation, timeline))

    def _deliver(
        self, generation: int, timeline: list[tuple[float, int, int]]
    ) -> Generator[simpy.Event, Any, None]:
        for at, _, key in timeline:
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            if generation != self._generation:
                return
            if key in self._pending:
                obj, _ = self._pending[key]
                self._fire(obj, self._forecast[key])


class MediumRadio(_Events):
    """Maps a :class:`~mecsim.channels.medium.Medium` onto the event clock, one change
    point at a time.

    Where :class:`Radio` forecasts a whole transmitter to the end of its
    transmissions at every start, a medium of many transmitters (and, with
    moving clients, a change point every tick) is stepped only to its next change
    point: one timeout, after which the medium advances to it, fires what ended
    and sets the next. A start advances it to now and re-plans. A forecast (how a
    reception ends if nothing else starts) is computed only when asked.
    ``on_resend(transmission, continued)`` hears of each downlink transmission a
    handover started at a client's new cell.
    """

    def __init__(self, env: simpy.Environment, medium: Any) -> None:
        super().__init__()
        self.env = env
        self.medium = medium
        self.on_resend: Any = None
        self._generation = 0
        self._forecasts: dict[int, Reception | Transmission] = {}
        self._forecast_at = -1.0

    def start(
        self,
        transmissions: Sequence[Transmission],
        joins: Sequence[tuple[Transmission, Sequence[Reception]]] = (),
    ) -> None:
        """Start ``transmissions`` now; add ``joins`` receivers to transmissions that
        started at this instant; re-plan."""
        self._sync()
        for transmission in transmissions:
            self.medium.start(transmission)
            self._watch(transmission)
            for r in transmission.receptions:
                self._watch(r)
        for transmission, receptions in joins:
            self.medium.join(transmission, list(receptions))
            for r in receptions:
                self._watch(r)
        started = [*transmissions, *(t for t, _ in joins)]
        for transmission in started:  # empty payloads end at once
            for obj in (*transmission.receptions, transmission):
                if not obj.open and id(obj) in self._pending:
                    self._fire(obj)
        self._forecasts, self._forecast_at = {}, -1.0
        self._schedule()

    def forecast(self, obj: Reception | Transmission) -> Reception | Transmission:
        """How ``obj`` ends if nothing else starts (itself if it has ended): the medium
        copied and advanced until everything on it ends (once per instant)."""
        if not obj.open:
            return obj
        if self._forecast_at != self.env.now:
            self._sync()
            clone = self.medium.clone()
            try:
                clone.advance(math.inf)
            except PermanentOutage as error:
                raise ConfigError("network.min_snr_db", str(error)) from None
            self._forecasts, self._forecast_at = clone.twins, self.env.now
        return self._forecasts.get(id(obj), obj)

    def _sync(self) -> None:
        """Advance the medium to now; fire what ended, in watch order; hand over resends."""
        self._fired = {}
        try:
            ended = self.medium.advance(self.env.now)
        except PermanentOutage as error:
            raise ConfigError("network.min_snr_db", str(error)) from None
        for r in sorted(ended, key=lambda r: self._order.get(id(r), -1)):
            if id(r) in self._pending:
                self._fire(r)
        for transmission, continued in self.medium.resent:
            self._watch(transmission)
            if self.on_resend is not None:
                self.on_resend(transmission, continued)
        self.medium.resent = []
        closed, self.medium.closed = self.medium.closed, []
        for transmission in sorted(closed, key=lambda t: self._order.get(id(t), -1)):
            if id(transmission) in self._pending:
                self._fire(transmission)

    def _schedule(self) -> None:
        self._generation += 1
        try:
            at = self.medium.next_change()
        except PermanentOutage as error:
            raise ConfigError("network.min_snr_db", str(error)) from None
        if math.isinf(at):
            busy = [r.client for t in self.medium.active for r in t.receptions if r.open]
            if busy:
                raise ConfigError("network.min_snr_db", str(PermanentOutage(busy)))
            return
        self._arm(self._generation, at)

    def _arm(self, generation: int, at: float) -> None:
        """Wake at ``at`` for plan ``generation``: the steps of a process that sleeps until
        then (an urgent event now, at which the sleep starts, so events at equal times keep
        the order a process gives them), as callbacks: a generator per plan cost more than
        the plan at every change point."""
        start = simpy.Event(self.env)  # triggered by hand, as SimPy's Initialize is
        start._ok, start._value = True, None
        start.callbacks.append(lambda _: self._sleep(generation, at))  # type: ignore[union-attr]
        self.env.schedule(start, URGENT)

    def _sleep(self, generation: int, at: float) -> None:
        if at > self.env.now:
            timeout = self.env.timeout(at - self.env.now)
            timeout.callbacks.append(lambda _: self._wake(generation))  # type: ignore[union-attr]
        else:
            self._wake(generation)

    def _wake(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._sync()
        self._schedule()
