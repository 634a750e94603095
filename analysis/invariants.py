"""The ledger's invariants, checked from a run's tables alone (``mecsim check-run RUN_DIR``).

Every figure mecsim reports comes from the events table, so the table must
be physically consistent. :func:`check_tables` recomputes, with its own
arithmetic and no simulator code, what each row implies:

* ``durations``: ``t_end >= t_start``, ``duration_s >= 0`` and
  ``t_end - t_start`` equal to ``duration_s`` up to the clock's rounding;
* ``row energy``: compute rows = the device's power x duration, uploads =
  the client's transmit power x duration, downloads = its receive power x
  duration, server computations = the server device's power x duration;
* ``send energy``: each of the server's transmissions used the integral of
  its power share ``P / n(t)`` over its air time, ``n(t)`` the transmissions
  on the air at ``t`` by the table; so the sends' energy sums to ``P`` x the
  radio's busy time (the union of the sends' intervals); with several cells,
  per cell radio;
* ``row energy`` of edge servers (their cell's device) and backhaul rows
  (``latency + 8 bytes / rate`` seconds, energy per bit x bits);
* ``overlaps``: per client, no two computations, two uploads or two
  downloads at once, and (but in wait-free rounds, whose personalized
  training runs during the communication window) no computation during a
  transfer;
* ``round bytes``: each round's ``bytes_up`` / ``bytes_down`` equal the
  events' (upload senders, download receivers);
* ``outcomes``: ``on_time + late + failed <= num_selected``;
* ``summary``: the byte, FLOP and energy totals of ``summary.json`` equal
  the sums of the rows.

Each check returns the rows it found wrong; none is a statistical test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mecsim.common.errors import MecsimError
from mecsim.engine.recorder import BYTE_FLOWS, EVENT_COLUMNS, flow

RTOL = 1e-9
"""Relative tolerance of every comparison of computed quantities."""


@dataclass
class Check:
    """One invariant: how many rows (or totals) it examined and what it found wrong."""

    name: str
    examined: int = 0
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None
    worst: dict[str, float] = field(default_factory=dict)
    """The largest relative error per quantity it compared (a replay's checks)."""

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class RunFacts:
    """What the checks need besides the tables (from ``scenario.resolved.toml``)."""

    server_tx_power_w: float
    server_power_w: float | None
    """The server device's compute power (None: a device this process does not know)."""
    protocol: str
    cell_tx_power_w: list[float] = field(default_factory=list)
    """Each cell's radio power (several cells: the events' ``cell`` says which radio)."""
    cell_power_w: list[float | None] = field(default_factory=list)
    """Each cell's edge device's compute power (None: unknown here)."""
    decisions: pd.DataFrame | None = None
    """The run's decisions table (upload powers under power control), if it has one."""
    backhaul: tuple[float, float, float] = (1e9, 0.0, 0.0)
    """(rate bit/s, latency s, J per bit) of ``[network.backhaul]``."""
    server_flops_per_s: float | None = None
    """The server device's speed (None: unknown here)."""
    cell_flops_per_s: list[float | None] = field(default_factory=list)
    """Each cell's edge device's speed (None: unknown here)."""


def watts(dbm: Any) -> Any:
    """``dbm`` (a number or an array) in W: the checks' own unit conversion."""
    return 10 ** (np.asarray(dbm, dtype=float) / 10) / 1e3


def _close(a: np.ndarray, b: np.ndarray, atol: np.ndarray | float = 0.0) -> np.ndarray:
    return np.abs(a - b) <= RTOL * np.maximum(np.abs(a), np.abs(b)) + atol


def _clock_tol(events: pd.DataFrame) -> np.ndarray:
    """Rounding of a time on the simulated clock near each row's end (a few ulps)."""
    return 8 * np.spacing(np.maximum(np.abs(events["t_end"].to_numpy(dtype=float)), 1.0))


def _first(rows: pd.DataFrame, what: Callable[[Any], str], limit: int = 5) -> list[str]:
    return [what(r) for r in rows.head(limit).itertuples()] + (
        [f"... and {len(rows) - limit} more"] if len(rows) > limit else []
    )


def _durations(events: pd.DataFrame) -> Check:
    check = Check("durations", len(events))
    d = events["duration_s"].to_numpy(dtype=float)
    span = (events["t_end"] - events["t_start"]).to_numpy(dtype=float)
    bad = (span < -_clock_tol(events)) | (d < 0) | ~_close(span, d, _clock_tol(events))
    check.problems = _first(
        events[bad],
        lambda r: (
            f"{r.phase} of client {r.client} at t={r.t_start:.9g}: "
            f"t_end - t_start = {r.t_end - r.t_start:.9g} s, duration_s = {r.duration_s:.9g} s"
        ),
    )
    return check


def _row_energy(events: pd.DataFrame, clients: pd.DataFrame, facts: RunFacts) -> Check:
    check = Check("row energy")
    by_client = clients.set_index("client")
    client = events["client"].to_numpy()
    phase, direction, role = events["phase"], events["direction"], events["role"]
    of_client = client >= 0
    power = np.full(len(events), np.nan)

    def per_client(column: str) -> np.ndarray:
        values = by_client[column].reindex(np.where(of_client, client, 0)).to_numpy(dtype=float)
        return values

    computing = (phase.str.startswith("compute") & of_client).to_numpy()
    uploading = ((direction == "up") & (role == "sender")).to_numpy() & of_client
    receiving = ((direction == "down") & (role == "receiver")).to_numpy() & of_client
    if "device_power_w" in by_client:
        power[computing] = per_client("device_power_w")[computing]
    else:
        check.skipped = "the clients table has no device_power_w (an older run): compute rows"
    from mecsim.analysis.decisions import upload_powers

    power[uploading] = upload_powers(events, clients, facts.decisions)[uploading]
    power[receiving] = per_client("rx_power_w")[receiving]
    server_work = (~of_client & (direction == "none")).to_numpy()
    if facts.server_power_w is not None:
        power[server_work] = facts.server_power_w
    else:
        check.skipped = "server computations: the server device is not registered here"
    if "cell" in events:  # an edge server computes on its cell's device
        cell = events["cell"].to_numpy()
        for k, watts_k in enumerate(facts.cell_power_w):
            power[server_work & (cell == k)] = np.nan if watts_k is None else watts_k
    _backhaul_power(events, facts, power, check)
    waiting = (phase == "wait:spectrum").to_numpy()
    power[waiting] = 0.0
    known = ~np.isnan(power)
    energy = events["energy_j"].to_numpy(dtype=float)
    expected = power * events["duration_s"].to_numpy(dtype=float)
    bad = known & ~_close(energy, expected, 1e-300)
    check.examined = int(known.sum())
    shown = events[bad].assign(expected=expected[bad])
    check.problems += _first(
        shown,
        lambda r: (
            f"{r.phase} of client {r.client} at t={r.t_start:.9g}: energy "
            f"{r.energy_j:.12g} J, power x duration = {r.expected:.12g} J"
        ),
    )
    return check


def _backhaul_power(events: pd.DataFrame, facts: RunFacts, power: np.ndarray, check: Check) -> None:
    """Backhaul rows: each lasts latency + 8 bytes / rate (a problem otherwise), and its
    ``power`` (filled in) is the energy per bit x bits over that duration."""
    backhaul = (events["role"] == "backhaul").to_numpy()
    if not backhaul.any():
        return
    rate, latency, per_bit = facts.backhaul
    bits = 8 * events["bytes"].to_numpy(dtype=float)
    seconds = events["duration_s"].to_numpy(dtype=float)
    wrong = backhaul & ~_close(seconds, latency + bits / rate, 1e-300)
    check.problems += _first(
        events[wrong],
        lambda r: (
            f"backhaul of cell {r.cell} at t={r.t_start:.9g}: {r.duration_s:.12g} s "
            "is not latency + 8 bytes / rate"
        ),
    )
    power[backhaul] = np.where(
        seconds[backhaul] > 0, per_bit * bits[backhaul] / np.maximum(seconds[backhaul], 1e-300), 0.0
    )


def _send_energy(events: pd.DataFrame, facts: RunFacts) -> Check:
    """Each send's energy = the integral of P / n(t) over it; their sum = P x busy time,
    per radio (each cell's, with several cells)."""
    sends = events[(events["client"] < 0) & (events["role"] == "sender")]
    if "cell" not in events or not facts.cell_tx_power_w:
        return _radio_energy(sends, facts.server_tx_power_w, Check("send energy", len(sends)))
    check = Check("send energy", len(sends))
    for cell, radio in sends.groupby("cell"):
        _radio_energy(radio, facts.cell_tx_power_w[int(cell)], check)
    return check


def _radio_energy(sends: pd.DataFrame, power_w: float, check: Check) -> Check:
    """:func:`_send_energy` for one radio of power ``power_w``; problems go to ``check``."""
    if sends.empty:
        return check
    start = sends["t_start"].to_numpy(dtype=float)
    end = sends["t_end"].to_numpy(dtype=float)
    times = np.unique(np.concatenate([start, end]))
    # n on each interval [times[k], times[k+1]): sends started at or before, not yet ended
    began = np.searchsorted(np.sort(start), times[:-1], side="right")
    ended = np.searchsorted(np.sort(end), times[:-1], side="right")
    on_air = began - ended
    widths = np.diff(times)
    share = np.where(on_air > 0, power_w / np.maximum(on_air, 1), 0.0)
    cumulative = np.concatenate([[0.0], np.cumsum(share * widths)])  # F(t) at each time
    integral = cumulative[np.searchsorted(times, end)] - cumulative[np.searchsorted(times, start)]
    energy = sends["energy_j"].to_numpy(dtype=float)
    atol = power_w * 8 * np.spacing(np.maximum(np.abs(end), 1.0))
    bad = ~_close(energy, integral, atol)
    check.problems += _first(
        sends[bad].assign(expected=integral[bad]),
        lambda r: (
            f"{r.phase} at t={r.t_start:.9g}..{r.t_end:.9g}: energy {r.energy_j:.12g} J, "
            f"integral of its power share {r.expected:.12g} J"
        ),
    )
    busy = float(widths[on_air > 0].sum())
    total, expected = float(energy.sum()), power_w * busy
    if not _close(np.array(total), np.array(expected), float(atol.max(initial=0.0)) * len(end)):
        check.problems.append(
            f"sends' energy {total:.12g} J, P x busy time {expected:.12g} J "
            f"({busy:.9g} s on the air)"
        )
    return check


def _overlaps(events: pd.DataFrame, facts: RunFacts) -> Check:
    rows = events[(events["client"] >= 0) & (events["duration_s"] > 0)]
    kind = np.select(
        [
            rows["phase"].str.startswith("compute").to_numpy(),
            ((rows["direction"] == "up") & (rows["role"] == "sender")).to_numpy(),
            ((rows["direction"] == "down") & (rows["role"] == "receiver")).to_numpy(),
        ],
        ["compute", "upload", "download"],
        default="",
    )
    rows = rows.assign(kind=kind)
    rows = rows[rows["kind"] != ""]
    check = Check("overlaps", len(rows))
    groups: list[tuple[str, pd.DataFrame]] = [(k, r) for k, r in rows.groupby("kind", sort=True)]
    if facts.protocol != "wait_free":
        groups.append(("compute or transfer", rows))
    for what, group in groups:
        group = group.sort_values(["client", "t_start", "t_end"], kind="stable")
        same = group["client"].to_numpy()[1:] == group["client"].to_numpy()[:-1]
        reach = group.groupby("client")["t_end"].cummax().to_numpy()[:-1]
        tol = _clock_tol(group)[1:]
        bad = same & (group["t_start"].to_numpy()[1:] < reach - tol)
        check.problems += _first(
            group.iloc[1:][bad],
            lambda r, what=what: (
                f"client {r.client}: {r.phase} at t={r.t_start:.9g} overlaps an earlier {what} row"
            ),
        )
    return check


def _round_bytes(events: pd.DataFrame, rounds: pd.DataFrame) -> Check:
    # runs written before bytes_down_air lack that column
    columns = [c for c in BYTE_FLOWS if c in rounds]
    check = Check("round bytes", len(columns) * len(rounds))
    for column in columns:
        mask = flow(events, column)
        moved = events.loc[mask, "bytes"].groupby(events.loc[mask, "round"]).sum()
        expected = moved.reindex(rounds["round"]).fillna(0).to_numpy()
        bad = rounds[column].to_numpy() != expected
        check.problems += _first(
            rounds[bad].assign(expected=expected[bad]),
            lambda r, c=column: f"round {r.round}: {c} = {getattr(r, c)}, events {r.expected:g}",
        )
    return check


def _outcomes(rounds: pd.DataFrame) -> Check:
    if "failed" not in rounds:
        return Check("outcomes", skipped="no failed column (an older run)")
    counted = rounds["failed"].copy()
    for column in ("on_time", "late"):
        if column in rounds:
            counted = counted + rounds[column]
    check = Check("outcomes", len(rounds))
    if "on_time" in rounds:
        bad = counted > rounds["num_selected"]
        check.problems = _first(
            rounds[bad],
            lambda r: (
                f"round {r.round}: on_time + late + failed > num_selected "
                f"({r.on_time} + {r.late} + {r.failed} > {r.num_selected})"
            ),
        )
    return check


def _summary(events: pd.DataFrame, rounds: pd.DataFrame, summary: dict[str, Any]) -> Check:
    check = Check("summary")
    of_client = events["client"] >= 0
    energy = events["energy_j"]
    expected: dict[str, float] = {
        f"{column}_total": float(events.loc[flow(events, column), "bytes"].sum())
        for column in BYTE_FLOWS
    }
    expected |= {
        "energy_j.client_compute": float(
            energy[of_client & events["phase"].str.startswith("compute")].sum()
        ),
        "energy_j.client_transmit": float(energy[of_client & (events["direction"] == "up")].sum()),
        "energy_j.client_receive": float(energy[of_client & (events["direction"] == "down")].sum()),
        "energy_j.server": float(energy[~of_client & (events["role"] != "backhaul")].sum()),
        "energy_j.backhaul": float(energy[events["role"] == "backhaul"].sum()),
        "client_flops_per_round": float(events.loc[of_client, "flops"].sum()) / max(len(rounds), 1),
        "server_flops_per_round": float(events.loc[~of_client, "flops"].sum())
        / max(len(rounds), 1),
    }
    for key, value in expected.items():
        reported: Any = summary
        for part in key.split("."):
            reported = reported.get(part) if isinstance(reported, dict) else None
        if reported is None:
            continue
        check.examined += 1
        if not math.isclose(float(reported), value, rel_tol=RTOL, abs_tol=1e-12):
            check.problems.append(f"{key} = {reported!r}, rows sum to {value!r}")
    return check


def check_tables(
    events: pd.DataFrame,
    rounds: pd.DataFrame,
    clients: pd.DataFrame,
    facts: RunFacts,
    summary: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
) -> list[Check]:
    """Every invariant of the module docstring over a run's tables, then (given the
    run's flattened ``settings``) the physics of :mod:`mecsim.analysis.physics`."""
    from mecsim.analysis.physics import physics_checks

    if "duration_s" not in events:  # written before durations were stored
        events = events.assign(duration_s=events["t_end"] - events["t_start"])
    checks = [
        _durations(events),
        _row_energy(events, clients, facts),
        _send_energy(events, facts),
        _overlaps(events, facts),
        _round_bytes(events, rounds),
        _outcomes(rounds),
    ]
    if summary is not None:
        checks.append(_summary(events, rounds, summary))
    if settings is not None:
        checks += physics_checks(events, rounds, clients, facts, settings, summary)
    if facts.decisions is not None:
        from mecsim.analysis.decisions import band_limits, power_limits

        checks.append(power_limits(facts.decisions, clients))
        checks.append(band_limits(events, facts.decisions, settings))
    return checks


def _number(value: Any, key: str) -> float:
    """``value`` if it is a real number (not true/false), else a clear ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} = {value!r} is not a number")
    return float(value)


def run_facts(settings: dict[str, Any]) -> RunFacts:
    """The facts of a run's settings (flattened dotted keys, as ``load_run`` gives them)."""
    from mecsim.learning.devices import DEVICES

    dbm = _number(settings["network.downlink.tx_power_dbm"], "network.downlink.tx_power_dbm")
    device = settings.get("server.device")
    cells = settings.get("network.cells") or []
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise ValueError(f"network.cells = {cells!r} is not a list of tables")
    for i, c in enumerate(cells):
        if c.get("tx_power_dbm") is not None:
            _number(c["tx_power_dbm"], f"network.cells.{i}.tx_power_dbm")
    backhaul = [
        _number(settings.get(f"network.backhaul.{key}", default), f"network.backhaul.{key}")
        for key, default in (("rate_mbps", 1000.0), ("latency_ms", 0.0), ("energy_nj_per_bit", 0.0))
    ]

    def device_of(name: object, what: str) -> float | None:
        known = isinstance(name, str) and name in DEVICES
        return getattr(DEVICES.get(name), what) if known else None

    edge = [_given(c.get("device"), device) for c in cells]
    return RunFacts(
        server_tx_power_w=float(watts(dbm)),
        server_power_w=device_of(device, "power_w"),
        protocol=settings["protocol.kind"],
        cell_tx_power_w=[float(watts(_given(c.get("tx_power_dbm"), dbm))) for c in cells],
        cell_power_w=[device_of(name, "power_w") for name in edge],
        backhaul=(backhaul[0] * 1e6, backhaul[1] / 1e3, backhaul[2] * 1e-9),
        server_flops_per_s=device_of(device, "flops_per_s"),
        cell_flops_per_s=[device_of(name, "flops_per_s") for name in edge],
    )


def _given(value: Any, default: Any) -> Any:
    """A cell's own setting, else the network's (None means unset)."""
    return default if value is None else value


def check_result(result: Any) -> list[Check]:
    """Check a :class:`~mecsim.runs.runner.RunResult` (``mecsim.run``'s answer) in memory."""
    from mecsim.analysis.compare import flatten

    settings = flatten(result.scenario.model_dump(mode="json"))
    facts = run_facts(settings)
    facts.decisions = getattr(result, "decisions", None)
    return check_tables(
        result.events, result.rounds, result.clients, facts, result.summary, settings
    )


def check_run_dir(run_dir: str | Path) -> list[Check]:
    """Check a run directory written by ``mecsim run`` (see :func:`check_tables`); read
    as ``compare`` and ``report`` read one (one clear error if it is not a run)."""
    from mecsim.analysis.compare import load_run

    run = load_run(run_dir)
    clients = Path(run_dir) / "clients.parquet"
    try:
        table = pd.read_parquet(clients)
    except (OSError, ValueError) as error:
        raise MecsimError(
            f"{clients.parent}: cannot read the run ({error}); is it complete?"
        ) from None
    try:  # an edited table, summary or scenario: a failed check, not a crash
        facts = run_facts(run.settings)
        decisions = Path(run_dir) / "decisions.parquet"
        facts.decisions = pd.read_parquet(decisions) if decisions.is_file() else None
        _well_formed(run.events, run.rounds, run.summary)
        return check_tables(run.events, run.rounds, table, facts, run.summary, run.settings)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        why = f"missing {error}" if isinstance(error, KeyError) else str(error).splitlines()[0]
        return [Check("readable", 1, [f"{Path(run_dir)}: not as mecsim wrote it: {why[:200]}"])]


def _well_formed(events: pd.DataFrame, rounds: pd.DataFrame, summary: dict[str, Any]) -> None:
    """Raise ValueError if a table's column or a summary figure is not of its kind."""
    missing = [c for c in EVENT_COLUMNS if c not in events and c != "duration_s"]
    if missing:
        raise ValueError(f"events.parquet lacks {', '.join(missing)}")
    for column in EVENT_COLUMNS:
        text = column in ("phase", "direction", "role")
        if column in events and not text and not pd.api.types.is_numeric_dtype(events[column]):
            raise ValueError(f"events.parquet's {column} is not numeric")
    for column in rounds:
        if column != "level" and not pd.api.types.is_numeric_dtype(rounds[column]):
            raise ValueError(f"rounds.parquet's {column} is not numeric")
    energy = summary.get("energy_j", {})
    if not isinstance(energy, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in energy.values()
    ):
        raise ValueError(f"summary.json's energy_j = {energy!r} is not a table of numbers")


def render(checks: list[Check]) -> str:
    """A pass/fail table, then each problem on its own line."""
    lines = [f"{'check':<16} {'result':<6} {'examined':>9}  note"]
    for c in checks:
        result = "FAIL" if c.problems else ("skip" if c.skipped and not c.examined else "ok")
        lines.append(f"{c.name:<16} {result:<6} {c.examined:>9}  {c.skipped or ''}".rstrip())
    for c in checks:
        lines += [f"{c.name}: {p}" for p in c.problems]
    for c in checks:
        if c.worst:
            lines.append(f"{c.name}: {_largest_errors(c.worst)}")
    return "\n".join(lines) + "\n"


def _largest_errors(worst: dict[str, float]) -> str:
    """The largest relative error per quantity: those above zero, then how many are exact."""
    inexact = {k: v for k, v in sorted(worst.items(), key=lambda kv: -kv[1]) if v > 0}
    shown = ", ".join(f"{k} {v:.2g}" for k, v in inexact.items())
    exact = len(worst) - len(inexact)
    if not shown:
        return f"largest relative error 0 (all {exact} quantities exact)"
    return f"largest relative error per quantity: {shown}; {exact} more exact"
