"""Compiled loops of the event-driven medium (numba).

The event medium (:mod:`mecsim.channels.event_medium`) integrates each reception
over the transmitters turning on and off since it was last touched: a ragged
[reception x event] set of pieces, tens of millions a round with every client
of 10,000 on the air. In numpy each piece costs a dozen temporaries (~250 ns);
here a piece is a few flops in one loop. The arithmetic is
:func:`mecsim.channels.fluid.link_rates`' on scalars, in the same order.

Compiled on first use and cached beside this file (``cache=True``).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable

import numpy as np
from numba import njit, prange

NO_CAP = np.zeros(0)
""":func:`refresh`'s ``cap`` when the rates have none."""


@njit(cache=True)
def link_rate(
    b: float, p: float, noise_psd: float, fade: float, path_gain: float,
    interference_w: float, efficiency: float, min_sinr: float, heard: float,
) -> tuple[float, float]:  # fmt: skip
    """(rate, SINR) of one reception: :func:`~mecsim.channels.fluid.link_rates` on scalars."""
    sinr = p * fade * path_gain / (noise_psd * b + (interference_w + heard))
    if sinr < min_sinr:
        return 0.0, sinr
    if math.isnan(efficiency):
        return b * math.log2(1.0 + sinr), sinr
    return efficiency * b, sinr


def _integrate(
    rows: np.ndarray, gain_row: np.ndarray, ev_col: np.ndarray, gains: np.ndarray,
    co: np.ndarray, width: np.ndarray, ev_t: np.ndarray, ev_tx: np.ndarray,
    ev_sign: np.ndarray, ev_cell: np.ndarray, n: int, t: float,
    at: np.ndarray, anchor: np.ndarray, heard: np.ndarray, rate: np.ndarray,
    sinr: np.ndarray, remaining: np.ndarray, sinr_time: np.ndarray, rx_cell: np.ndarray,
    share_b: np.ndarray, share_p: np.ndarray, noise_psd: np.ndarray, fade: np.ndarray,
    path_gain: np.ndarray, interference_w: np.ndarray, efficiency: np.ndarray,
    min_sinr: np.ndarray,
) -> None:  # fmt: skip
    """Rows ``rows`` (of the row columns given) up to ``t`` over events ``at[row]`` to
    ``n - 1`` of a log: from the anchor at the rate held, a new piece at each co-channel
    event ``k``, at the interference after it: the held interference plus, per such event,
    ``gains[ev_col[k], gain_row[i]] * sign * min(1, b / width[tx])`` (an event of a cell
    not co-channel changes nothing: the piece goes on). Updates ``remaining``,
    ``sinr_time`` and ``heard`` in place. Rows are independent: :data:`integrate_parallel`
    spreads them over numba's threads with the same arithmetic per row."""
    for i in prange(len(rows)):  # a range where compiled without parallel
        r = rows[i]
        k = at[r]
        since = anchor[r]  # the piece under way began here, at the rate held
        piece_rate, piece_sinr = rate[r], sinr[r]
        bits = quality = 0.0
        h = heard[r]
        b, cell, g_row = share_b[r], rx_cell[r], gain_row[i]
        while k < n:
            if co[cell, ev_cell[k]]:  # else the piece goes on at the same rate
                bits += piece_rate * (ev_t[k] - since)
                quality += piece_sinr * (ev_t[k] - since)
                since = ev_t[k]
                h += gains[ev_col[k], g_row] * ev_sign[k] * min(1.0, b / width[ev_tx[k]])
                piece_rate, piece_sinr = link_rate(
                    b, share_p[r], noise_psd[r], fade[r], path_gain[r], interference_w[r],
                    efficiency[r], min_sinr[r], h,
                )  # fmt: skip
            k += 1
        bits += piece_rate * (t - since)
        quality += piece_sinr * (t - since)
        remaining[r] -= bits
        sinr_time[r] += quality
        heard[r] = h


def _named(function: Callable, name: str) -> Callable:
    """``function`` under another name: numba caches a compiled function by its name, so
    two compilations of one source (serial, parallel) need two."""
    twin = types.FunctionType(function.__code__, function.__globals__, name,
                              function.__defaults__, function.__closure__)  # fmt: skip
    twin.__qualname__, twin.__doc__ = name, function.__doc__
    return twin


def _twins(function: Callable, name: str) -> tuple[Callable, Callable]:
    """``function`` (a loop over independent rows written with ``prange``) compiled twice:
    serial, and spread over numba's threads, with the same arithmetic per row."""
    return (njit(cache=True)(_named(function, name)),
            njit(cache=True, parallel=True)(_named(function, f"{name}_parallel")))  # fmt: skip


PARALLEL_ROWS = 64
"""From this many rows a loop's parallel twin is faster (2 us to start the threads)."""


def by_rows(rows: int, serial: Callable, parallel: Callable) -> Callable:
    """The twin for a loop over ``rows`` rows."""
    return parallel if rows >= PARALLEL_ROWS else serial


integrate, integrate_parallel = _twins(_integrate, "integrate")


def _refresh(
    rows: np.ndarray, t: float, remaining: np.ndarray, bits: np.ndarray, done: float,
    heard: np.ndarray, floor: np.ndarray, share_b: np.ndarray, share_p: np.ndarray,
    noise_psd: np.ndarray, fade: np.ndarray, path_gain: np.ndarray, interference_w: np.ndarray,
    efficiency: np.ndarray, min_sinr: np.ndarray, start: np.ndarray, block: np.ndarray,
    coherence: np.ndarray, deadline: np.ndarray, rate: np.ndarray, sinr: np.ndarray,
    done_at: np.ndarray, key: np.ndarray, cap: np.ndarray,
) -> None:  # fmt: skip
    """Rows ``rows`` anchored at ``t``: their rate and SINR at the interference ``heard``
    (the rate at most ``cap[i]`` where ``cap`` is given: a fixed-rate multicast at its
    lowest), when each ends if nothing changes (``done_at``: done, its fading block over
    or its deadline passed) and the same with only its ``floor`` of interference from
    other cells, the least it can hear (``key``; ``t`` for a row already done, at most
    ``done`` of its ``bits`` left, which ends at the next change point)."""
    for i in prange(len(rows)):
        r = rows[i]
        link = (share_b[r], share_p[r], noise_psd[r], fade[r], path_gain[r],
                interference_w[r], efficiency[r], min_sinr[r])  # fmt: skip
        rate[r], sinr[r] = link_rate(*link, heard[r])
        if len(cap):
            rate[r] = min(rate[r], cap[i])
        best = link_rate(*link, floor[r])[0]
        own = min(start[r] + (block[r] + 1) * coherence[r], deadline[r])
        done_at[r] = min(t + remaining[r] / rate[r] if rate[r] > 0 else math.inf, own)
        key[r] = min(t + remaining[r] / best if best > 0 else math.inf, own)
        if remaining[r] <= done * bits[r]:
            key[r] = t


refresh, refresh_parallel = _twins(_refresh, "refresh")


@njit(cache=True)
def rows_where(alive: np.ndarray, column: np.ndarray, value: int) -> np.ndarray:
    """The open rows whose ``column`` is ``value``."""
    out = np.empty(len(alive), dtype=np.int64)
    m = 0
    for i in range(len(alive)):
        if alive[i] and column[i] == value:
            out[m] = i
            m += 1
    return out[:m]


@njit(cache=True)
def stamped(rows: np.ndarray, at: np.ndarray, log_tx: np.ndarray, n: int,
            table_stamp: np.ndarray, tick: int) -> bool:  # fmt: skip
    """Whether the gains of every sender in the log since the anchors of ``rows`` (events
    ``min(at[rows])`` to ``n - 1``) were computed in ``tick``: then no piece needs a gain
    the stations' gain table does not hold."""
    first = n
    for r in rows:
        first = min(first, at[r])
    for e in range(first, n):
        if table_stamp[log_tx[e]] != tick:
            return False
    return True


@njit(cache=True)
def station_tables(
    stations: np.ndarray, senders: np.ndarray, width: np.ndarray, cell: np.ndarray,
    co: np.ndarray, gains: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Prefix sums of ``P h`` (``full``) and of ``P h / B`` (``scaled``), [sender + 1 x
    station], over ``senders`` sorted by band (``width[x]``), per base station (a column of
    ``gains``, in cell ``stations[s]``), zero for a sender of a cell (``cell[x]``) not
    co-channel with the station's (``Interference._prefix_sums``' arithmetic); and the
    senders' distinct ``bands`` with ``ends``, how many senders hold each or a narrower one.
    A sender's gains to every station are read side by side (one row of ``gains``)."""
    m, k = len(senders), len(stations)
    full, scaled = np.zeros((m + 1, k)), np.zeros((m + 1, k))
    bands, ends = np.empty(m), np.empty(m, dtype=np.int64)
    distinct = 0
    for j in range(m):
        x = senders[j]
        b = width[x]
        if distinct and bands[distinct - 1] == b:
            ends[distinct - 1] = j + 1
        else:
            bands[distinct], ends[distinct] = b, j + 1
            distinct += 1
        for s in range(k):
            g = gains[x, s] * (1.0 if co[stations[s], cell[x]] else 0.0)
            full[j + 1, s] = full[j, s] + g
            scaled[j + 1, s] = scaled[j, s] + g / b
    return full, scaled, bands[:distinct], ends[:distinct]


def _station_heard(
    which: np.ndarray, rx_cell: np.ndarray, band: np.ndarray, bands: np.ndarray,
    ends: np.ndarray, full: np.ndarray, scaled: np.ndarray, gains: np.ndarray, co: np.ndarray,
    width: np.ndarray, ev_tx: np.ndarray, ev_sign: np.ndarray, ev_cell: np.ndarray,
    first: int, n: int,
) -> np.ndarray:  # fmt: skip
    """Uplink interference of receptions decoded at base station ``which`` (a column of
    ``gains``, a column of the :func:`station_tables`, in cell ``rx_cell``) holding ``band``: the
    tables' senders of band <= b counted fully and the wider ones by b / B, plus events
    ``first`` to ``n - 1`` of the log since the tables (``P h min(1, b / B)``, + on, - off).
    The senders' distinct ``bands`` (sorted) and ``ends`` (how many senders hold each band
    or a narrower one) find the senders of band <= b in a search over a few bands."""
    m = full.shape[0] - 1
    out = np.empty(len(which))
    for i in prange(len(which)):
        w, b = which[i], band[i]
        j = np.searchsorted(bands, b, side="right")
        k = ends[j - 1] if j > 0 else 0
        h = full[k, w] + b * (scaled[m, w] - scaled[k, w])
        for e in range(first, n):
            if co[rx_cell[i], ev_cell[e]]:
                x = ev_tx[e]
                h += gains[x, w] * ev_sign[e] * min(1.0, b / width[x])
        out[i] = h
    return out


station_heard, station_heard_parallel = _twins(_station_heard, "station_heard")


@njit(cache=True)
def step_rows(
    rows: np.ndarray, t: float, step: float, done: float, anchor: np.ndarray,
    remaining: np.ndarray, bits: np.ndarray, sinr_time: np.ndarray, rate: np.ndarray,
    sinr: np.ndarray, deadline: np.ndarray, start: np.ndarray, block: np.ndarray,
    coherence: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Rows ``rows`` (exact, at their rates since their anchors) from their anchors to
    ``t``, then one step of length ``step``: :func:`mecsim.channels.fluid.step`'s
    arithmetic on scalars, in its order. Returns (ended, failed, end time, fading block
    over: ``block`` moved on, the caller draws its gain); anchors at ``t + step``."""
    now = t + step
    tol = 1e-12 * max(1.0, abs(now))
    n = len(rows)
    ended, failed = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
    end, boundary = np.empty(n), np.zeros(n, dtype=np.bool_)
    for i in range(n):
        r = rows[i]
        span = t - anchor[r]
        remaining[r] -= rate[r] * span
        sinr_time[r] += sinr[r] * span
        need = remaining[r] / rate[r] if rate[r] > 0 else math.inf
        finished = need <= step + tol or remaining[r] <= done * bits[r]
        air = min(need, step) if finished else step
        sinr_time[r] = sinr_time[r] + sinr[r] * air
        remaining[r] = 0.0 if finished else remaining[r] - rate[r] * step
        failed[i] = not finished and now >= deadline[r] - tol
        over = start[r] + (block[r] + 1) * coherence[r]
        if not finished and not failed[i] and now >= over - tol:
            block[r] += 1
            boundary[i] = True
        end[i] = t + air if finished else now
        ended[i] = finished or failed[i]
        anchor[r] = now
    return ended, failed, end, boundary


@njit(cache=True)
def claim(values: np.ndarray, stamp: np.ndarray, now: int) -> np.ndarray:
    """The distinct ``values`` whose ``stamp`` is not ``now``, in order of first
    appearance; their stamps set to ``now`` (a cache's entries claimed for refilling)."""
    out = np.empty(len(values), dtype=np.int64)
    m = 0
    for v in values:
        if stamp[v] != now:
            stamp[v] = now
            out[m] = v
            m += 1
    return out[:m]


@njit(cache=True)
def squared_distances(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """[point x point] squared distances from the (``x``, ``y``) points (rows) to the
    ``at`` ones ([k x 2], columns), at least 1e-18 m^2."""
    out = np.empty((len(x), len(at)))
    for j in range(len(x)):
        for s in range(len(at)):
            dx, dy = x[j] - at[s, 0], y[j] - at[s, 1]
            out[j, s] = max(dx * dx + dy * dy, 1e-18)
    return out


@njit(cache=True)
def fill_rows(table: np.ndarray, rows: np.ndarray, g: np.ndarray, power: np.ndarray) -> None:
    """``table[rows] = g * power[rows][:, None]``, row by row."""
    for j in range(len(rows)):
        for s in range(table.shape[1]):
            table[rows[j], s] = g[j, s] * power[rows[j]]


@njit(cache=True)
def gain_of_squared(squared: float, scale: float, reference2: float, half: int) -> float:
    """``LogDistancePathLoss.gain_of_squared`` on a scalar, for an exponent of ``2 half``
    (``squared_form``): ``scale / (squared / reference2)^half`` in its products."""
    ratio = squared / reference2
    power = ratio * ratio if half > 1 else ratio
    for _ in range(half - 2):
        power = power * ratio
    return scale / power


@njit(cache=True)
def _block_sum(a: np.ndarray, first: int, n: int) -> float:
    """numpy's sum of at most 128 contiguous terms: in order below 8, else eight running
    sums in blocks of 8, paired, then the rest in order."""
    if n < 8:
        total = 0.0
        for i in range(n):
            total += a[first + i]
        return total
    r = a[first : first + 8].copy()
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += a[first + i + j]
        i += 8
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for rest in range(i, n):
        total += a[first + rest]
    return total


@njit(cache=True)
def pairwise_sum(a: np.ndarray, first: int, n: int) -> float:
    """``a[first:first + n].sum()`` as numpy sums a contiguous row, to the bit: blocks of
    at most 128 (:func:`_block_sum`), halves (a multiple of 8 first) added above. The
    halving is an explicit stack, not a recursion (numba's cache breaks recursive
    functions)."""
    if n <= 128:
        return _block_sum(a, first, n)
    todo = np.empty((128, 3), dtype=np.int64)  # (first, n, halves added yet?)
    sums = np.empty(128)
    top, done = 0, 0
    todo[0] = first, n, 0
    while top >= 0:
        f, m, combine = todo[top]
        top -= 1
        if m <= 128:
            sums[done] = _block_sum(a, f, m)
            done += 1
        elif combine:
            done -= 1
            sums[done - 1] = sums[done - 1] + sums[done]
        else:
            half = m // 2
            half -= half % 8
            todo[top + 1] = f, m, 1
            todo[top + 2] = f + half, m - half, 0
            todo[top + 3] = f, half, 0
            top += 3
    return sums[0]


@njit(cache=True)
def radios_heard(
    clients: np.ndarray, rx_cell: np.ndarray, share_b: np.ndarray, table: np.ndarray,
    columns: np.ndarray, sender_cell: np.ndarray, width: np.ndarray, co: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Downlink interference of moving ``clients`` (in cells ``rx_cell``, holding
    ``share_b``): ``sum_r P h min(1, b / B_r)`` over the radios on the air (columns
    ``columns`` of the [client x radio] ``table`` of ``P h``, in cells ``sender_cell``,
    of bands ``width``) co-channel with the client's cell; numpy's masked products and
    row sums (``Interference._heard``), in their order."""
    out = np.empty(len(clients))
    terms = np.empty(len(columns))
    for i in range(len(clients)):
        for j in range(len(columns)):
            g = table[clients[i], columns[j]] if co[rx_cell[i], sender_cell[j]] else 0.0
            terms[j] = g * min(1.0, share_b[i] / width[j])
        out[i] = 0.0 + pairwise_sum(terms, 0, len(columns))
    return out


@njit(cache=True)
def received_powers(
    squared: np.ndarray, power: np.ndarray, scale: float, reference2: float, half: int
) -> np.ndarray:
    """[point x site] ``power[s]`` times the path gain at each ``squared`` distance
    (:func:`gain_of_squared` of ``LogDistancePathLoss.squared_form``): the numpy path loss
    and multiplication, in their order."""
    n, sites = squared.shape
    out = np.empty((n, sites))
    for i in range(n):
        for s in range(sites):
            out[i, s] = gain_of_squared(squared[i, s], scale, reference2, half) * power[s]
    return out


@njit(cache=True)
def _fill_row(
    table: np.ndarray, x: int, px: float, py: float, at: np.ndarray, power: np.ndarray,
    scale: float, reference2: float, half: int,
) -> None:  # fmt: skip
    """``table[x, s]``: the gain from (``px``, ``py``) to ``at[s]`` (:func:`gain_of_squared`
    of the squared distance, at least 1e-18 m^2) times ``power[x]``."""
    for s in range(table.shape[1]):
        dx, dy = px - at[s, 0], py - at[s, 1]
        g = gain_of_squared(max(dx * dx + dy * dy, 1e-18), scale, reference2, half)
        table[x, s] = g * power[x]


@njit(cache=True)
def fill_gains(
    table: np.ndarray, rows: np.ndarray, x: np.ndarray, y: np.ndarray, at: np.ndarray,
    power: np.ndarray, scale: float, reference2: float, half: int,
) -> None:  # fmt: skip
    """:func:`squared_distances`, :func:`gain_of_squared` and :func:`fill_rows` in one pass:
    ``table[rows[j], s]`` the gain from (``x[j]``, ``y[j]``) to ``at[s]`` times
    ``power[rows[j]]``."""
    for j in range(len(rows)):
        _fill_row(table, rows[j], x[j], y[j], at, power, scale, reference2, half)


def _fill_sender_gains(
    table: np.ndarray, rows: np.ndarray, site_x: np.ndarray, site_y: np.ndarray,
    client: np.ndarray, client_x: np.ndarray, client_y: np.ndarray, at: np.ndarray,
    power: np.ndarray, scale: float, reference2: float, half: int,
) -> None:  # fmt: skip
    """:func:`fill_gains` for transmitters ``rows`` where they are now: a moving uplink
    (``client[x] >= 0``) at its client's (``client_x``, ``client_y``), any other at its
    site."""
    for j in prange(len(rows)):
        x, c = rows[j], client[rows[j]]
        px, py = (client_x[c], client_y[c]) if c >= 0 else (site_x[x], site_y[x])
        _fill_row(table, x, px, py, at, power, scale, reference2, half)


fill_sender_gains, fill_sender_gains_parallel = _twins(_fill_sender_gains, "fill_sender_gains")


@njit(cache=True)
def claim_senders(
    columns: np.ndarray, stamp: np.ndarray, now: int, client: np.ndarray, placed: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`claim` of the transmitters ``columns`` and, in the same pass, of the moving
    clients (``client[x] >= 0``) of those claimed (``placed``: the clients' stamps):
    (the transmitters, the clients), each in order of first appearance."""
    tx, clients = np.empty(len(columns), dtype=np.int64), np.empty(len(columns), dtype=np.int64)
    m = n = 0
    for x in columns:
        if stamp[x] != now:
            stamp[x] = now
            tx[m] = x
            m += 1
            c = client[x]
            if c >= 0 and placed[c] != now:
                placed[c] = now
                clients[n] = c
                n += 1
    return tx[:m], clients[:n]


def _aim(
    index: np.ndarray, up: np.ndarray, client: np.ndarray, tx: np.ndarray,
    serving: np.ndarray, stations: np.ndarray, radio_x: np.ndarray, radio_y: np.ndarray,
    cx: np.ndarray, cy: np.ndarray, rx: np.ndarray, ry: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Rows ``index`` of moving clients at (``cx``, ``cy``): each receiver (``rx``,
    ``ry``: the serving cell's base station, a row of ``stations``, for an uplink; the
    client for a downlink from the radio of transmitter ``tx``) and the distance between
    the two ends, at least 1e-9 m (``Medium._aim``'s arithmetic)."""
    d = np.empty(len(index))
    for i in prange(len(index)):
        r = index[i]
        if up[r]:
            s = serving[client[r]]
            fx, fy = stations[s, 0], stations[s, 1]
            rx[r], ry[r] = fx, fy
        else:
            fx, fy = radio_x[tx[r]], radio_y[tx[r]]
            rx[r], ry[r] = cx[i], cy[i]
        d[i] = max(np.hypot(fx - cx[i], fy - cy[i]), 1e-9)
    return d


aim, aim_parallel = _twins(_aim, "aim")
