"""The simulator's transfers: downloads, uploads and their rows in the events table.

A mix-in of :class:`~mecsim.engine.simulation.Simulation` (it uses the simulation's
clock, network, recorder, fault model and ledger): each transfer is a short
process generator a protocol composes, timed by :class:`~mecsim.net.network.Network`.
"""

from __future__ import annotations

import math

from mecsim.algorithms.base import (
    SERVER,
)
from mecsim.channels.sharing import Reception, Transmission
from mecsim.engine.process import Process
from mecsim.learning.devices import energy_j
from mecsim.learning.state import Payload, by_identity, payload_nbytes
from mecsim.net.handover import Handover
from mecsim.net.network import upload_key
from mecsim.net.radio import Broadcast, Delivery

HANDOVER_LOOKAHEAD_S = 1.0
"""How far ahead (simulated s) the handover recorder looks for the next handover."""


class Transfers:
    """Downloads and uploads of a :class:`~mecsim.engine.simulation.Simulation` (a mix-in)."""

    def downlink_transfers(
        self,
        round_: int,
        payloads: dict[int, Payload | None],
        key: tuple | None = None,
        join: object = None,
    ) -> dict[int, Delivery]:
        """Start this round's downlink to each client now; return each client's delivery.

        The payload goes out as one broadcast only when the algorithm sends
        the same payload to everyone and ``network.downlink.mode`` is
        ``broadcast``; otherwise each client gets its own unicast transmission.
        All share the server's radio (:class:`~mecsim.net.network.Network`).
        ``key`` names the transmission's fading streams (default: the round);
        broadcasts with the same ``join`` key started at the same instant are
        one transmission.
        """
        size = by_identity(payload_nbytes)  # a broadcast payload is sized once
        nbytes = {c: size(payload) for c, payload in payloads.items()}
        broadcast = self.algorithm.broadcast and self.network.config.downlink.mode == "broadcast"
        key = ("round", round_) if key is None else key
        return self._transmit(round_, nbytes, key, broadcast, join=join)

    def _transmit(
        self,
        round_: int,
        nbytes: dict[int, int],
        key: tuple,
        broadcast: bool,
        phase: str = "downlink-send",
        join: object = None,
    ) -> dict[int, Delivery]:
        """Start the server's transmission(s) now; each is recorded when it ends."""
        deliveries, started = self.network.downlink(nbytes, key, broadcast, join)
        for sent in started:
            sent.transmission.tag = (round_, phase)
            self._account_send(round_, phase, sent)
        return deliveries

    def _account_send(self, round_: int, phase: str, sent: Broadcast) -> None:
        """Record the server's transmission ``sent`` when it ends (or is cut off)."""
        tx, n, cell = sent.transmission, sent.nbytes, sent.cell
        token = self._begin(
            lambda tx=tx, n=n, cell=cell: self._record_send(round_, phase, n, tx, cell=cell)
        )
        sent.done.callbacks.append(
            lambda event, n=n, token=token, cell=cell: self._record_send(
                round_, phase, n, event.value, token, cell
            )
        )

    def _resent(self, sent: Broadcast, continued: Transmission) -> None:
        """A handover re-sends the rest of ``continued`` from the client's new cell: its
        own ``downlink-send:handover`` row, in the round of the transmission it continues."""
        round_, phase = continued.tag  # type: ignore[misc]  # the resend carries it too
        self._account_send(round_, f"{phase.split(':')[0]}:handover", sent)

    def _record_send(
        self,
        round_: int,
        phase: str,
        nbytes: int,
        t: Transmission,
        token: int | None = None,
        cell: int = 0,
    ) -> None:
        """Record the server's transmission ``t`` of ``nbytes``: ended, or (still open when
        the run ends) cut off now with the bytes its best receiver got and the energy of
        the power share it held so far."""
        if token is not None:
            self._end(token)
        end = t.end
        if end is None:
            phase, end = f"{phase}:cutoff", self.env.now
            nbytes = max(int(r.bits - r.remaining) // 8 for r in t.receptions)
        self.recorder.event(
            round_,
            SERVER,
            phase,
            t.start,
            end,
            direction="down",
            role="sender",
            nbytes=nbytes,
            energy_j=t.energy_j,
            cell=cell,
        )

    def download(self, round_: int, delivery: Delivery | None, job: int | None = None) -> Process:
        """Client receives its downlink payload; returns whether it arrived (None: nothing sent).

        A failed reception (``network.max_transfer_s``) is retried
        ``network.retries`` times as a unicast transmission to that client.
        """
        if delivery is None:
            return True
        reception = yield from self._receive(round_, job, delivery)
        for attempt in range(1, self.network.config.retries + 1):
            if not reception.failed:
                break
            key = (*delivery.key, "retry", attempt)
            retry = self._transmit(round_, {reception.client: delivery.nbytes}, key, False)
            reception = yield from self._receive(round_, job, retry[reception.client])
        return not reception.failed

    def _receive(self, round_: int, job: int | None, delivery: Delivery) -> Process:
        """Wait for one reception to end and record it (cut off if the run ends first)."""
        r, nbytes = delivery.reception, delivery.nbytes
        token = self._begin(lambda: self.record_download(round_, job, r, nbytes))
        reception = yield delivery.done
        self._end(token)
        self.record_download(round_, job, reception, nbytes)
        return reception

    def record_download(
        self, round_: int, job: int | None, r: Reception, nbytes: int, phase: str = "download"
    ) -> None:
        """Record a client's reception of a download (see :meth:`_record_transfer`)."""
        rx_power_w = self.clients[r.client].device.rx_power_w
        self._record_transfer(round_, job, r.client, r, nbytes, phase, "down", rx_power_w)

    def _record_transfer(
        self,
        round_: int,
        job: int | None,
        client: int,
        r: Reception,
        nbytes: int,
        phase: str,
        direction: str,
        power_w: float,
    ) -> None:
        """Record the client's side of a transfer (``down``: it receives at ``power_w``;
        ``up``: it sends): ended (delivered or failed), or still open and cut off now with
        the bits it carried so far."""
        if r.end is None:
            r, phase = r.cut(self.env.now), f"{phase}:cutoff"
            nbytes = int(r.bits) // 8
        self.recorder.event(
            round_,
            client,
            f"{phase}:failed" if r.failed else phase,
            r.start,
            r.end,
            duration_s=r.duration_s,
            job=job,
            direction=direction,
            role="receiver" if direction == "down" else "sender",
            nbytes=0 if r.failed else nbytes,
            energy_j=energy_j(power_w, r.duration_s),
            rate_bps=r.effective_rate_bps,
            snr_db=r.mean_sinr_db,
        )

    def upload(self, round_: int, client: int, payload: Payload, job: int | None = None) -> Process:
        """Client sends its upload on its own band; returns whether it arrived.

        Time spent waiting for spectrum (a finite ``network.uplink`` cell band)
        is a ``wait:spectrum`` event; a failed transfer is an ``upload:failed``
        event and is retried ``network.retries`` times.
        """
        nbytes = payload_nbytes(payload)
        job_key = round_ if job is None else job
        for attempt in range(self.network.config.retries + 1):
            key = upload_key(job_key, attempt)
            asked = self.env.now
            granted: list[float] = []  # when the band was granted, once it is
            token = self._begin(
                lambda key=key, asked=asked, granted=granted: self._cut_upload(
                    round_, client, nbytes, key, asked, granted, job
                )
            )
            start, r = yield from self.network.upload(client, nbytes, key, granted.append)
            self._end(token)
            self.record_upload(round_, client, nbytes, asked, start, r, job)
            if not r.failed:
                self.update_arrived(round_, client)
                return True
        return False

    def record_upload(
        self,
        round_: int,
        client: int,
        nbytes: int,
        asked: float,
        granted: float,
        r: Reception,
        job: int | None,
    ) -> None:
        """Record the wait for spectrum, if any, and the upload (ended, or cut off now)."""
        if granted > asked:
            self.recorder.event(
                round_, client, "wait:spectrum", asked, granted, job=job, direction="up"
            )
        power_w = self.network.upload_power(client, nbytes)
        uplink = self.network.config.uplink
        if uplink.power != "fixed":
            self.recorder.decide(round_, granted, [client], [power_w], "power", uplink.power)
        if self.network.allocation.splits and uplink.total_bandwidth_mhz is not None:
            mean_hz = r.band_time / r.duration_s if r.duration_s > 0 else 0.0
            self.recorder.decide(round_, granted, [client], [mean_hz], "band", uplink.allocation)
            for t, hz in r.bands:
                self.recorder.decide(round_, t, [client], [hz], "band_change", uplink.allocation)
        self._record_transfer(round_, job, client, r, nbytes, "upload", "up", power_w)

    def _cut_upload(
        self,
        round_: int,
        client: int,
        nbytes: int,
        key: tuple,
        asked: float,
        granted: list[float],
        job: int | None,
    ) -> None:
        """An upload still waiting for spectrum or on the air when the run ends."""
        now = self.env.now
        if not granted:
            if now > asked:
                self.recorder.event(
                    round_, client, "wait:spectrum", asked, now, job=job, direction="up"
                )
            return
        r = self.network.upload_progress(client, nbytes, key, granted[0], now)
        self.record_upload(round_, client, nbytes, asked, granted[0], r, job)

    def record_handovers(self) -> Process:
        """Record each handover as it happens: a ``handover`` row of the client from its
        time over the break (no bytes, no energy; ``round`` -1; with several cells the
        ``cell`` is the new one). Runs until the protocol ends the run."""
        schedule = self.network.handovers
        assert schedule is not None
        recorded = 0
        while True:
            now = self.env.now
            at = schedule.next_after(now, now + HANDOVER_LOOKAHEAD_S)
            yield self.env.timeout((now + HANDOVER_LOOKAHEAD_S if math.isinf(at) else at) - now)
            schedule.advance(self.env.now)
            due = []
            for h in schedule.handovers[recorded:]:
                if h.t > self.env.now:
                    break
                due.append(h)
            recorded += len(due)
            if due:
                self._record_handovers(due, schedule.interruption_s)

    def _record_handovers(self, handovers: list[Handover], break_s: float) -> None:
        """The ``handover`` rows of ``handovers`` (due now), recorded in order when their
        break ends (all cut off if the run ends first): one timeout and one activity for
        all."""

        def record(cut_off: bool) -> None:
            now, phase = self.env.now, "handover:cutoff" if cut_off else "handover"
            for h in handovers:
                self.recorder.event(-1, h.client, phase, h.t, now if cut_off else h.t + break_s)

        token = self._begin(lambda: record(cut_off=True))

        def over(_: object) -> None:
            self._end(token)
            record(cut_off=False)

        self.env.timeout(break_s).callbacks.append(over)

    def public_download(self) -> Process:
        """Every client downloads the public split once, before round 0 (a broadcast)."""
        if not self.public_nbytes:
            return
        nbytes = dict.fromkeys(range(len(self.clients)), self.public_nbytes)
        deliveries = self._transmit(-1, nbytes, ("public",), True, "downlink-send:public")
        receptions = yield self.env.all_of([d.done for d in deliveries.values()])
        for r in receptions.values():
            self.record_download(-1, None, r, self.public_nbytes, "download:public")
