"""The open receptions of a medium as arrays: one step of the fluid model for all at once.

:class:`Slots` keeps, per open reception, what its rate and progress depend
on (bits left, path gain, noise, fading gain, its transmitter and
transmission, deadline and fading block) in numpy arrays, and the
:class:`~mecsim.channels.sharing.Reception` objects as handles: their fields are
written when a reception ends (or :meth:`Slots.write_back` is asked). The
arithmetic is :meth:`SharedTransmitter.plan
<mecsim.channels.sharing.SharedTransmitter.plan>` and ``apply``'s, on arrays:
each transmitter's band and power split equally among its transmissions, the
rate ``b log2(1 + p |g|^2 h / ((N0 + I_psd) b + I_w + I_heard))``, nothing below
the outage threshold, a fixed-rate multicast at its worst receiver's rate, a
reception finishing within a step ending at its exact time.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from mecsim.channels.sharing import _DONE, Reception, finish_within, send_time

FIELDS = ("remaining", "bits", "sinr_time", "start", "deadline", "coherence", "block",
          "min_sinr", "path_gain", "noise_psd", "interference_w", "fade", "efficiency",
          "rx", "ry")  # fmt: skip
INTS = ("tx", "tr", "client")


def reception_row(r: Reception, x: float, y: float, now: float) -> dict[str, float]:
    """Reception ``r``'s columns of :data:`FIELDS` (and ``client``), decoded at (``x``,
    ``y``), from ``now`` (a resumed reception's fading block catches up)."""
    budget, track = r.rate, r.track
    coherence = track.coherence_s
    if coherence < math.inf:
        r.block = max(r.block, math.floor((now - r.start) / coherence))
    se = budget.spectral_efficiency  # type: ignore[attr-defined]
    return {
        "remaining": r.remaining, "bits": r.bits, "sinr_time": r.sinr_time, "start": r.start,
        "deadline": r.deadline, "coherence": coherence, "block": r.block,
        "min_sinr": r.min_sinr, "path_gain": budget.path_gain,  # type: ignore[attr-defined]
        "noise_psd": budget.noise_psd_w_hz + budget.interference_psd_w_hz,  # type: ignore[attr-defined]
        "interference_w": budget.interference_w,  # type: ignore[attr-defined]
        "fade": track.gain(r.block), "efficiency": math.nan if se is None else se,
        "rx": x, "ry": y, "client": r.client,
    }  # fmt: skip


def reception_fields(
    receptions: list[Reception], rx: list[tuple[float, float]], now: float
) -> dict[str, list]:
    """:func:`reception_row` of each reception, as a list per column."""
    rows: dict[str, list] = {f: [] for f in (*FIELDS, "client")}
    for r, (x, y) in zip(receptions, rx, strict=True):
        for f, value in reception_row(r, x, y, now).items():
            rows[f].append(value)
    return rows


class Slots:
    """Open receptions in arrays (see the module docstring)."""

    def __init__(self) -> None:
        self.objects: list[Reception] = []
        self.a: dict[str, np.ndarray] = {f: np.zeros(0) for f in FIELDS}
        self.a.update({f: np.zeros(0, dtype=np.int64) for f in INTS})
        self.up = np.zeros(0, dtype=bool)
        self.worst = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.objects)

    def add(
        self,
        receptions: list[Reception],
        tx: int,
        tr: int,
        up: bool,
        worst: bool,
        rx: list[tuple[float, float]],
        now: float,
    ) -> None:
        """Append open ``receptions`` of transmission slot ``tr`` on transmitter ``tx``,
        decoded at ``rx``, from ``now`` (a resumed reception's fading block catches up)."""
        if not receptions:
            return
        rows = reception_fields(receptions, rx, now)
        rows["tx"] = [tx] * len(receptions)
        rows["tr"] = [tr] * len(receptions)
        for f, values in rows.items():
            self.a[f] = np.concatenate([self.a[f], np.asarray(values, dtype=self.a[f].dtype)])
        self.up = np.concatenate([self.up, np.full(len(receptions), up)])
        self.worst = np.concatenate([self.worst, np.full(len(receptions), worst)])
        self.objects += receptions

    def write_back(self, index: np.ndarray | None = None) -> None:
        """Copy the arrays' progress into the reception objects (all, or ``index``)."""
        a = self.a
        rows = range(len(self.objects)) if index is None else index.tolist()
        for i in rows:
            r = self.objects[i]
            r.remaining = float(a["remaining"][i])
            r.sinr_time = float(a["sinr_time"][i])
            r.block = int(a["block"][i])

    def remove(self, drop: np.ndarray) -> list[Reception]:
        """Take the slots where ``drop`` is set out (their objects written back first)."""
        index = np.flatnonzero(drop)
        if not len(index):
            return []
        self.write_back(index)
        gone = [self.objects[i] for i in index.tolist()]
        keep = ~drop
        self.a = {f: v[keep] for f, v in self.a.items()}
        self.up, self.worst = self.up[keep], self.worst[keep]
        self.objects = list(itertools.compress(self.objects, keep.tolist()))
        return gone

    def copy(self) -> tuple[Slots, dict[int, Reception]]:
        """A copy with copied reception objects, and the map ``id(original) -> copy``."""
        import copy as _copy

        twin = Slots()
        twin.a = {f: v.copy() for f, v in self.a.items()}
        twin.up, twin.worst = self.up.copy(), self.worst.copy()
        twin.objects = [_copy.copy(r) for r in self.objects]
        return twin, {id(r): c for r, c in zip(self.objects, twin.objects, strict=True)}


class Groups:
    """The slots grouped by transmission (for per-transmission minima and maxima)."""

    def __init__(self, tr: np.ndarray) -> None:
        self.order = None if np.all(tr[1:] >= tr[:-1]) else np.argsort(tr, kind="stable")
        ordered = tr if self.order is None else tr[self.order]
        first = (
            np.concatenate([[True], ordered[1:] != ordered[:-1]]) if len(tr) else np.zeros(0, bool)
        )
        self.starts = np.flatnonzero(first)
        index = np.cumsum(first) - 1
        if self.order is not None:
            index = index[np.argsort(self.order, kind="stable")]
        self.index = index
        """Each slot's group."""

    def reduce(self, ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        """``ufunc`` over each group's values."""
        ordered = values if self.order is None else values[self.order]
        return ufunc.reduceat(ordered, self.starts) if len(ordered) else ordered


def rates(
    slots: Slots, share_b: np.ndarray, share_p: np.ndarray, heard: np.ndarray, groups: Groups
) -> tuple[np.ndarray, np.ndarray]:
    """(rate, SINR) of every open reception holding ``share_b`` Hz at ``share_p`` W and
    hearing ``heard`` W from other cells (a ``worst`` transmission: its lowest rate)."""
    rate, sinr = link_rates(slots.a, share_b, share_p, heard)
    if slots.worst.any():
        rate = np.where(slots.worst, groups.reduce(np.minimum, rate)[groups.index], rate)
    return rate, sinr


def link_rates(
    a: dict[str, np.ndarray], share_b: np.ndarray, share_p: np.ndarray, heard: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(rate, SINR) of receptions with columns ``a`` holding ``share_b`` Hz at ``share_p``
    W and hearing ``heard`` W from other cells (elementwise; columns may be broadcast)."""
    noise = a["noise_psd"] * share_b
    sinr = share_p * a["fade"] * a["path_gain"] / (noise + (a["interference_w"] + heard))
    shannon = share_b * np.log2(1.0 + sinr)
    rate = np.where(np.isnan(a["efficiency"]), shannon, a["efficiency"] * share_b)
    return np.where(sinr >= a["min_sinr"], rate, 0.0), sinr


def horizon(slots: Slots, t: float, rate: np.ndarray, until: float) -> float:
    """The next change point after ``t`` (at most ``until``): a reception finishing, a
    fading block boundary or a deadline.

    A broadcast receiver that finishes before the others changes no rate (the
    transmission goes on to its last receiver) but is an event: whoever waits for it
    (its computation, its upload) starts then, so the medium stops there too.
    """
    a = slots.a
    if not len(slots):
        return until
    ends = t + send_time(a["remaining"], rate)
    return float(min(until, ends.min(), next_boundary(slots).min(), a["deadline"].min()))


def next_boundary(slots: Slots) -> np.ndarray:
    """When each open reception's fading block ends (:attr:`Reception.next_boundary`)."""
    a = slots.a
    return a["start"] + (a["block"] + 1) * a["coherence"]


def step(
    slots: Slots, t: float, step_s: float, rate: np.ndarray, sinr: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Advance every open reception by ``step_s`` from ``t``; returns (ended, failed, end
    times) masks/arrays over the slots (state updated in place; nothing removed)."""
    a = slots.a
    now = t + step_s
    tol = 1e-12 * max(1.0, abs(now))
    need = send_time(a["remaining"], rate)
    done = (need <= step_s + tol) | (a["remaining"] <= _DONE * a["bits"])
    finish, air_if_done = finish_within(t, need, step_s)
    air = np.where(done, air_if_done, step_s)
    a["sinr_time"] = a["sinr_time"] + sinr * air
    a["remaining"] = np.where(done, 0.0, a["remaining"] - rate * step_s)
    failed = ~done & (now >= a["deadline"] - tol)
    boundary = ~done & ~failed & (now >= next_boundary(slots) - tol)
    if boundary.any():
        a["block"] = np.where(boundary, a["block"] + 1, a["block"])
        for i in np.flatnonzero(boundary).tolist():
            r = slots.objects[i]
            a["fade"][i] = r.track.gain(int(a["block"][i]))
    end = np.where(done, finish, now)
    return done | failed, failed, end


def close(slots: Slots, ended: np.ndarray, failed: np.ndarray, end: np.ndarray) -> list[Reception]:
    """Take the ended slots out, their objects closed at their end times."""
    index = np.flatnonzero(ended)
    ends, fails = end[index].tolist(), failed[index].tolist()
    gone = slots.remove(ended)
    for r, e, f in zip(gone, ends, fails, strict=True):
        r.end, r.failed = e, f
        if not f:
            r.remaining = 0.0
    return gone
