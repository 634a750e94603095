"""Values that are valid but physically implausible for their unit, most likely a unit
slip (a distance of 0.3 m where 0.3 km was meant): a warning line each, no refusal.

Client values are checked as drawn (a number, a distribution or a client table alike):
distances under 1 m or beyond 100 km, bands under 1 kHz, client transmit powers above
50 dBm (100 W; a phone sends at most about 23 dBm). With positions, a client may stand
next to its base station, so distances under 1 m are flagged only when most clients are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mecsim.config.sections import Scenario
from mecsim.net.network import ClientProfile

MIN_DISTANCE_M, MAX_DISTANCE_M = 1.0, 100e3
MIN_BAND_MHZ = 1e-3
MAX_CLIENT_POWER_DBM = 50.0


def _share(mask: np.ndarray) -> str:
    """``"3 of 20 clients"``."""
    return f"{int(mask.sum())} of {len(mask)} clients"


def _client_lines(sc: Scenario, clients: Sequence[ClientProfile]) -> list[str]:
    distance = np.array([c.distance_m for c in clients])
    band_mhz = np.array([c.bandwidth_hz for c in clients]) / 1e6
    power = np.array([c.tx_power_dbm for c in clients])
    placed = not np.isnan([c.x_m for c in clients]).all()
    where = "clients.x_m/y_m" if placed else "clients.distance_m"
    if sc.clients.table is not None:
        where += " or clients.table"
    near, far = distance < MIN_DISTANCE_M, distance > MAX_DISTANCE_M
    narrow, loud = band_mhz < MIN_BAND_MHZ, power > MAX_CLIENT_POWER_DBM
    if placed and near.mean() <= 0.5:  # a few beside their base station: where they stand
        near = np.zeros_like(near)
    found = [
        (near, f"{where}: {_share(near)} are under {MIN_DISTANCE_M:g} m from their base "
         f"station (closest {distance.min():.3g} m); distances are in metres (km meant? x1000)"),
        (far, f"{where}: {_share(far)} are beyond {MAX_DISTANCE_M / 1e3:g} km from their base "
         f"station (farthest {distance.max() / 1e3:.3g} km); distances are in metres"),
        (narrow, f"clients.bandwidth_mhz: {_share(narrow)} "
         f"have a band under 1 kHz (narrowest {band_mhz.min():.3g} MHz); bands are in MHz "
         "(Hz or kHz meant?)"),
        (loud, f"clients.tx_power_dbm: {_share(loud)} send above {MAX_CLIENT_POWER_DBM:g} dBm "
         f"(highest {power.max():.3g} dBm = {10 ** (power.max() / 10) / 1e3:.3g} W); powers "
         "are in dBm (a phone: about 23)"),
    ]  # fmt: skip
    return [line for mask, line in found if mask.any()]


def implausible_settings(sc: Scenario, clients: Sequence[ClientProfile]) -> list[str]:
    """A line per implausible value (see the module docstring): the clients' drawn
    distances, bands and powers, the cells' and the downlink's bands."""
    lines = _client_lines(sc, clients) if clients else []
    bands = {
        "network.uplink.total_bandwidth_mhz": sc.network.uplink.total_bandwidth_mhz,
        "network.downlink.bandwidth_mhz": sc.network.downlink.bandwidth_mhz,
    }
    for i, cell in enumerate(sc.network.cells):
        bands[f"network.cells[{i}].bandwidth_mhz"] = cell.bandwidth_mhz
    lines += [
        f"{key} = {value:g}: a band under 1 kHz; bands are in MHz (Hz or kHz meant?)"
        for key, value in bands.items()
        if value is not None and value < MIN_BAND_MHZ
    ]
    return lines
