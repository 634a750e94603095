"""Closed forms of transfers alone on their links, for bulk rounds.

:class:`ClosedForms` is a mix-in of :class:`~mecsim.net.network.Network`: where every
transfer of a round is alone on its link and its timing has a closed form (no fading,
no deadline, no waiting for spectrum, one cell, static clients), bulk rounds
(:mod:`mecsim.protocols.bulk`) time a whole round's transfers in numpy, operation for
operation as the event-driven engine would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mecsim.channels import NoFading, dbm_to_w
from mecsim.channels.sharing import finish_within, send_time, step_length
from mecsim.net.radio import ClosedForm
from mecsim.net.settings import LinkConfig


class ClosedForms:
    """Bulk rounds' closed forms of a :class:`~mecsim.net.network.Network` (a mix-in)."""

    def closed_form_blocker(self) -> str | None:
        """Why a transfer's timing needs the event-driven engine, or None when every transfer
        alone on its link has a closed form: no fading, no deadline (so no failure or retry),
        no interference drawn per transfer, and a per-client uplink band (no waiting)."""
        if not isinstance(self.channel.fading, NoFading):
            return "fading"
        if self.config.uplink.power != "fixed":
            return "network.uplink.power"
        if self.config.max_transfer_s is not None:
            return "network.max_transfer_s"
        if self.cell_hz is not None:
            return "network.uplink.total_bandwidth_mhz"
        if len(self.cells) > 1:
            return "network.cells (interference between cells)"
        if self.handovers is not None:
            return "clients.mobility (moving clients)"
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
                "down_bandwidth_hz": np.array([self.cells[c.cell].bandwidth_hz for c in self.clients]),
                "down_power_w": np.array([self.cells[c.cell].tx_power_w for c in self.clients]),
            }  # fmt: skip
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
        if np.any(sinr < self.outage_sinr(link)):
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
