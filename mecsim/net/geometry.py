"""Where clients and cells are: positions on a plane, distances, and cell association.

A scenario without ``network.cells`` has one cell, and each client's distance
to it comes from ``clients.distance_m`` as before. With cells (or with client
positions, ``clients.x_m`` / ``clients.y_m`` or ``x_m`` / ``y_m`` columns of
``clients.table``), every distance is the Euclidean distance between two
positions, and each client associates with the cell whose downlink it
receives strongest on average: the largest ``P_c h(d_c)``, the cell's
transmit power times the path gain over the distance to it (the first such
cell on a tie). With equal powers that is the nearest cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mecsim.channels import LogDistancePathLoss


@dataclass(frozen=True, slots=True)
class Cell:
    """A base station with its edge server: where it is and what it transmits with."""

    id: int
    x_m: float
    y_m: float
    bandwidth_hz: float
    """The downlink band of its transmitter, shared by its transmissions."""
    tx_power_w: float
    device: str
    """The edge server's compute device."""


def distances(x_m: np.ndarray, y_m: np.ndarray, cells: list[Cell]) -> np.ndarray:
    """[client, cell] Euclidean distances in m (``math.hypot``, so a client at (d, 0) is
    exactly d from a cell at the origin)."""
    out = np.empty((len(x_m), len(cells)))
    for j, cell in enumerate(cells):
        out[:, j] = [
            math.hypot(x - cell.x_m, y - cell.y_m)
            for x, y in zip(x_m.tolist(), y_m.tolist(), strict=True)
        ]
    return out


def associate(
    distance_m: np.ndarray, cells: list[Cell], pathloss: LogDistancePathLoss
) -> np.ndarray:
    """Per client, the index of the cell with the strongest mean received power
    ``P_c h(d_c)`` (the first on a tie); ``distance_m`` is [client, cell]."""
    power = np.array([c.tx_power_w for c in cells])
    received = power[None, :] * np.asarray(pathloss.gain(distance_m), dtype=float)
    return np.argmax(received, axis=1) if len(cells) else np.zeros(len(distance_m), int)


def co_channel(a: Cell, b: Cell, reuse: int) -> bool:
    """Whether two different cells use the same channel: with reuse factor K, cell ids
    are coloured ``id mod K`` and cells of one colour share the spectrum (K = 1: all)."""
    return a.id != b.id and a.id % reuse == b.id % reuse
