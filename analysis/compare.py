"""Compare runs: time to target accuracy, speedups over compute-and-wait, idle time, energy, bytes.

Time to target (Chen et al. 2023, Table 4): the simulated time at which an
accuracy first reaches the target; for personalized accuracy the time is
``t_personal`` (when the evaluated personal models were complete), for
generic accuracy ``t_end``. A run's speedup at a target is its baseline's
time divided by its own: by default the compute-and-wait run whose other
settings (algorithm, seed, swept keys) all equal the run's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import tomllib

from mecsim.analysis.costs import energy_breakdown, simulated_time
from mecsim.analysis.scheduling import SCHEDULING_COLUMNS, scheduling_measures
from mecsim.common.errors import MecsimError

DEFAULT_BASELINE = "protocol.kind=compute_and_wait"
"""The run a speedup is measured against: this setting, every other one equal."""


@dataclass
class RunRecord:
    """A finished run as read back from its run directory (or held in memory)."""

    label: str
    algorithm: str
    protocol: str
    rounds: pd.DataFrame
    events: pd.DataFrame
    summary: dict
    settings: dict = field(default_factory=dict)
    """The resolved scenario, flattened to dotted keys (what :func:`distinguish` compares)."""
    clients: pd.DataFrame | None = None
    """The clients table, where the run directory has one."""
    decisions: pd.DataFrame | None = None
    """The decisions table (scheduling, power, band), where the run directory has one."""
    run_dir: Path | None = None
    """Where it was read from (what tells apart runs whose settings are all equal)."""


def flatten(mapping: dict, prefix: str = "") -> dict[str, object]:
    """Nested tables as one level of dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    out: dict[str, object] = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


IGNORED = ("versions.", "output.", "compare.")
"""Resolved-scenario keys that never tell runs apart (provenance, output options)."""


def _compared(key: str, ignore: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()) -> bool:
    """Whether ``key`` tells runs apart (not provenance, not in ``ignore`` or ``prefixes``)."""
    return key != "name" and key not in ignore and not key.startswith((*IGNORED, *prefixes))


def settings_signature(
    run: RunRecord, ignore: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()
) -> tuple:
    """The run's compared settings (see :func:`_compared`) as a hashable key."""
    return tuple(
        sorted((k, repr(v)) for k, v in run.settings.items() if _compared(k, ignore, prefixes))
    )


def distinguish(runs: list[RunRecord], ignore: tuple[str, ...] = ()) -> None:
    """Make labels unique: runs sharing a label get ``key=value`` for each setting
    (but ``ignore``) that differs among them appended; runs that still share one (every
    setting equal), their run directory's name."""
    for group in _label_ties(runs):
        keys = sorted({k for r in group for k in r.settings if _compared(k, ignore)})
        differing = [k for k in keys if len({repr(r.settings.get(k)) for r in group}) > 1]
        chosen = [k for k in differing if not _implied(k, group)]
        differing = chosen or differing
        for run in group:
            extra = ", ".join(f"{k}={run.settings.get(k)}" for k in differing)
            if extra:
                run.label = f"{run.label} ({extra})"
    for run in (r for group in _label_ties(runs) for r in group if r.run_dir is not None):
        run.label = f"{run.label} [{run.run_dir.name}]"


def _label_ties(runs: list[RunRecord]) -> list[list[RunRecord]]:
    """The groups of two or more runs that share a label."""
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(run.label, []).append(run)
    return [group for group in groups.values() if len(group) > 1]


def load_run(run_dir: str | Path) -> RunRecord:
    """Read a run directory written by ``mecsim run``."""
    run_dir = Path(run_dir)
    needed = ["rounds.parquet", "events.parquet", "summary.json", "scenario.resolved.toml"]
    missing = [n for n in needed if not (run_dir / n).is_file()]
    if missing:
        raise MecsimError(f"{run_dir} is not a mecsim run directory (missing {', '.join(missing)})")
    name = "scenario.resolved.toml"
    try:
        scenario = tomllib.loads((run_dir / name).read_text(encoding="utf-8"))
        algorithm = str(scenario["algorithm"]["name"])
        protocol = str(scenario["protocol"]["kind"])
        if protocol == "wait_free":
            protocol = f"wait_free/{scenario['protocol'].get('personal_budget', 'epochs')}"
        name = "summary.json"
        summary = json.loads((run_dir / name).read_text(encoding="utf-8"))
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
        tables = []
        for name in ("rounds.parquet", "events.parquet"):
            tables.append(pd.read_parquet(run_dir / name))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        why = f"missing {error}" if isinstance(error, KeyError) else str(error).splitlines()[0]
        raise MecsimError(
            f"{run_dir / name} cannot be read ({why[:200]}); is the run directory complete? "
            "rerun the run or leave it out"
        ) from None
    rounds, events = tables
    if rounds.empty:
        raise MecsimError(
            f"{run_dir}: its rounds table is empty (no round finished); rerun it or leave it out"
        )
    missing = [c for c in RUN_TABLE_COLUMNS["rounds"] if c not in rounds]
    missing += [c for c in RUN_TABLE_COLUMNS["events"] if c not in events]
    if missing:
        raise MecsimError(
            f"{run_dir} lacks the column {missing[0]!r} in its tables; rerun the run or leave it out"
        )
    clients, decisions = (_optional_table(run_dir, n) for n in ("clients", "decisions"))
    label = f"{algorithm} / {protocol}"
    return RunRecord(label, algorithm, protocol, rounds, events, summary, flatten(scenario),
                     clients, decisions, run_dir)  # fmt: skip


def _optional_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """``NAME.parquet`` of a run directory, or None where it has none (older runs)."""
    path = run_dir / f"{name}.parquet"
    try:
        return pd.read_parquet(path) if path.is_file() else None
    except (OSError, ValueError):
        return None


RUN_TABLE_COLUMNS = {
    "rounds": (
        "round",
        "t_start",
        "t_end",
        "generic_acc",
        "personal_acc",
        "bytes_up",
        "bytes_down",
    ),
    "events": ("round", "client", "phase", "direction", "role", "t_start", "t_end", "bytes"),
}
"""Columns the comparison and report tables read from every run."""


def time_to_target(rounds: pd.DataFrame, column: str, target: float) -> float:
    """First simulated time at which ``column`` >= ``target`` (NaN if never)."""
    time_column = "t_personal" if column == "personal_acc" and "t_personal" in rounds else "t_end"
    reached = rounds[rounds[column] >= target]
    return float(reached[time_column].min()) if len(reached) else math.nan


def idle_time_per_client(events: pd.DataFrame) -> float:
    """Mean over clients of the time between t=0 and the run's end not spent downloading,
    computing or uploading (overlapping activities count once)."""
    end = events["t_end"].max() if len(events) else 0.0
    clients = events[events["client"] >= 0]
    if clients.empty:
        return math.nan
    idle = []
    for _, rows in clients.groupby("client"):
        busy, reach = 0.0, 0.0
        for start, stop in sorted(zip(rows["t_start"], rows["t_end"], strict=True)):
            if stop > reach:
                busy += stop - max(start, reach)
                reach = stop
        idle.append(end - busy)
    return float(np.mean(idle))


def baseline_setting(baseline: str) -> tuple[str, object]:
    """``KEY=VALUE`` as the key and its value read as TOML, as ``--set`` reads it
    (``protocol.relay=true`` is the boolean; a bare word is a string)."""
    from mecsim.config.scenario import parse_override

    return parse_override(baseline)


def has_setting(run: RunRecord, key: str, value: object) -> bool:
    """Whether ``run``'s ``key`` is ``value`` (TOML-equal, or equal as text: ``True``)."""
    setting = run.settings.get(key)
    if isinstance(setting, bool) != isinstance(value, bool):
        return str(setting) == str(value)
    return setting == value or str(setting) == str(value)


def default_baseline(runs: list[RunRecord]) -> str | None:
    """The baseline a comparison takes when none is given: compute-and-wait
    (:data:`DEFAULT_BASELINE`) where some runs use it and some do not; else the first run's
    value of the first swept setting (seeds aside: a relay-against-HierFAVG or a bandwidth
    sweep is measured against its first point); None for runs that differ in seed alone."""
    key, _, value = DEFAULT_BASELINE.partition("=")
    kinds = {str(r.settings.get(key)) for r in runs}
    if value in kinds and len(kinds) > 1:
        return DEFAULT_BASELINE
    swept = [k for k in varying_keys(runs) if k != "seed"]
    if not swept:
        return None
    first = runs[0].settings.get(swept[0])
    return f"{swept[0]}={_toml_text(first)}"


def _toml_text(value: object) -> str:
    """A value as TOML spells it (``true``, ``5``, ``"a b"``; a bare word unquoted)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and value.replace("_", "").replace("-", "").isalnum():
        return value
    return json.dumps(value)


def match_baselines(
    runs: list[RunRecord], baseline: str | None = DEFAULT_BASELINE
) -> list[int | None]:
    """For each run, the index of its baseline run (None: none).

    ``baseline`` is ``KEY=VALUE`` (the value read as TOML): a run's baseline is the first
    run with that value whose settings equal the run's on every other key, except the
    keys of KEY's table (a wait-free run's own protocol keys) and provenance/output keys.
    So a seed-2 run is compared with the seed-2 baseline, a 5 MHz run with the 5 MHz one.
    """
    if baseline is None:
        return [None] * len(runs)
    key, value = baseline_setting(baseline)
    table = (key.split(".")[0] + ".",)
    found: dict[tuple, int] = {}
    for index, run in enumerate(runs):
        if has_setting(run, key, value):
            found.setdefault(settings_signature(run, prefixes=table), index)
    return [found.get(settings_signature(run, prefixes=table)) for run in runs]


def _implied(key: str, runs: list[RunRecord]) -> bool:
    """Whether ``key`` differs only by being absent from some runs: a key of one policy or
    algorithm (``scheduling.alpha``), which the choice of it already tells apart."""
    present = {repr(r.settings[key]) for r in runs if r.settings.get(key) is not None}
    return len(present) == 1 and any(r.settings.get(key) is None for r in runs)


def varying_keys(runs: list[RunRecord], ignore: tuple[str, ...] = ()) -> list[str]:
    """The compared settings whose values differ among ``runs`` (the swept keys)."""
    keys = sorted({k for r in runs for k in r.settings if _compared(k, ignore)})
    return [k for k in keys if len({repr(r.settings.get(k)) for r in runs}) > 1]


def _cell(value: object) -> object:
    """A setting as a table cell (tables and lists as their text)."""
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def comparison_columns(targets: list[float]) -> list[str]:
    """The numeric columns :func:`compare_runs` writes, besides the swept settings."""
    per_target = [
        f"{kind}_{what}_{t:g}"
        for what in ("time", "speedup")
        for kind in ("pm", "gm")
        for t in targets
    ]
    return [
        *per_target,
        *RUN_COLUMNS,
        *COMMUNICATION_COLUMNS,
        *SCHEDULING_COLUMNS,
        *NEW_CLIENT_COLUMNS,
    ]


RUN_COLUMNS = (
    "sim_time_s",
    "final_pm_acc",
    "final_gm_acc",
    "idle_s_per_client",
    "energy_j",
    "idle_energy_j",
    "backhaul_energy_j",
    "bytes_up",
    "bytes_down",
    "bytes_backhaul",
    "handovers_per_round",
)
NEW_CLIENT_COLUMNS = (
    "new_clients",
    "new_client_acc",
    "new_client_acc_std",
    "new_client_accs",
    "new_client_bytes_down",
    "new_client_bytes_down_per_client",
    "new_client_flops",
    "new_client_flops_per_client",
    "new_client_join_s",
)
"""The new clients' results (:mod:`mecsim.engine.newcomers`); see :mod:`.columns`."""
COMMUNICATION_COLUMNS = (
    "best_pm_acc",
    "pm_acc_std",
    "best_gm_acc",
    "bytes_up_per_round",
    "bytes_down_per_round",
    "bytes_up_total",
    "bytes_down_total",
    "public_bytes_down",
    "public_download_s",
    "upload_s_per_round",
    "download_s_per_round",
    "client_state_peak_bytes",
    "server_state_peak_bytes",
)


def compare_runs(
    runs: list[RunRecord], targets: list[float], baseline: str | None = DEFAULT_BASELINE
) -> pd.DataFrame:
    """One row per run: a column per swept setting, time to each target (personalized and
    generic), speedups over the run's baseline (:func:`match_baselines`; None: none),
    costs (:mod:`.columns` says what each column is)."""
    rows = []
    swept = varying_keys(runs)
    for run in runs:
        row = {"run": run.label, "algorithm": run.algorithm, "protocol": run.protocol}
        row.update({key: _cell(run.settings.get(key)) for key in swept})
        for target in targets:
            row[f"pm_time_{target:g}"] = time_to_target(run.rounds, "personal_acc", target)
            row[f"gm_time_{target:g}"] = time_to_target(run.rounds, "generic_acc", target)
        row["sim_time_s"] = simulated_time(run.events, run.rounds)
        row["final_pm_acc"] = run.summary.get("final_personal_acc", math.nan)
        row["final_gm_acc"] = run.summary.get("final_generic_acc", math.nan)
        row["idle_s_per_client"] = idle_time_per_client(run.events)
        energy = energy_breakdown(run.events, run.rounds, run.clients)
        row["energy_j"] = energy["total"]
        row["idle_energy_j"] = energy["client_idle"]
        row["backhaul_energy_j"] = energy["backhaul"]
        row["bytes_up"] = int(run.rounds["bytes_up"].sum())
        row["bytes_down"] = int(run.rounds["bytes_down"].sum())
        backhaul = run.events["role"] == "backhaul"  # edge <-> cloud (hierarchical runs)
        row["bytes_backhaul"] = int(run.events.loc[backhaul, "bytes"].sum())
        handovers = run.events["phase"].astype(str).str.startswith("handover").sum()
        row["handovers_per_round"] = float(handovers) / max(len(run.rounds), 1)
        row.update(communication(run))
        row.update(scheduling_measures(run))
        row.update(newcomer_measures(run.summary))
        rows.append(row)
    table = pd.DataFrame(rows)
    matched = match_baselines(runs, baseline)
    table["baseline"] = [runs[i].label if i is not None else "" for i in matched]
    for target in targets:
        for kind in ("pm", "gm"):
            column = f"{kind}_time_{target:g}"
            base = [table[column].iloc[i] if i is not None else math.nan for i in matched]
            table[f"{kind}_speedup_{target:g}"] = pd.Series(base, dtype=float) / table[column]
    return table


def communication(run: RunRecord) -> dict[str, float]:
    """Accuracy against what was communicated (COMET Tables III/IV, in bytes and seconds)."""
    s = run.summary
    split = s.get("time_split_s", {})
    return {
        "best_pm_acc": s.get("best_personal_acc", math.nan),
        "pm_acc_std": s.get("final_personal_acc_std", math.nan),
        "best_gm_acc": s.get("best_generic_acc", math.nan),
        "bytes_up_per_round": s.get("bytes_up_per_round", math.nan),
        "bytes_down_per_round": s.get("bytes_down_per_round", math.nan),
        "bytes_up_total": s.get("bytes_up_total", math.nan),
        "bytes_down_total": s.get("bytes_down_total", math.nan),
        "public_bytes_down": s.get("public_bytes_down_total", 0),
        "public_download_s": s.get("public_download_s", 0.0),
        "upload_s_per_round": split.get("upload", math.nan),
        "download_s_per_round": split.get("download", math.nan),
        "client_state_peak_bytes": s.get("client_state_peak_bytes", math.nan),
        "server_state_peak_bytes": s.get("server_state_peak_bytes", math.nan),
    }


def newcomer_measures(summary: dict) -> dict[str, object]:
    """The new clients' columns (NaN, and 0 clients, where the run had none)."""
    k = int(summary.get("new_clients", 0))
    accs = summary.get("new_client_accs") or []
    per = (lambda total: total / k) if k else (lambda total: math.nan)
    nbytes, flops = summary.get("new_client_bytes_down", 0), summary.get("new_client_flops", 0)
    return {
        "new_clients": k,
        "new_client_acc": summary.get("new_client_acc", math.nan),
        "new_client_acc_std": summary.get("new_client_acc_std", math.nan),
        "new_client_accs": ";".join(f"{a:.6g}" for a in accs),
        "new_client_bytes_down": nbytes if k else math.nan,
        "new_client_bytes_down_per_client": per(nbytes),
        "new_client_flops": flops if k else math.nan,
        "new_client_flops_per_client": per(flops),
        "new_client_join_s": summary.get("new_client_join_s", math.nan),
    }


def t_half_width(values: np.ndarray) -> np.ndarray:
    """Per column, the 95 % confidence half-width of the mean of the non-NaN values
    (Student t); NaN with fewer than two."""
    from scipy import stats

    values = np.where(np.isfinite(values), values, np.nan)
    n = np.sum(~np.isnan(values), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # columns with fewer than 2 values
        spread = np.nanstd(values, axis=0, ddof=1) / np.sqrt(n)
        half = stats.t.ppf(0.975, np.maximum(n - 1, 1)) * spread
    return np.where(n > 1, half, np.nan)


def variant_groups(runs: list[RunRecord]) -> list[tuple[str, list[int]]]:
    """Runs equal in every setting but the seed, as (variant label, run indices)."""
    groups: dict[tuple, list[int]] = {}
    for index, run in enumerate(runs):
        groups.setdefault(settings_signature(run, ignore=("seed",)), []).append(index)
    representatives = [
        dataclasses.replace(
            runs[rows[0]], label=f"{runs[rows[0]].algorithm} / {runs[rows[0]].protocol}"
        )
        for rows in groups.values()
    ]
    distinguish(representatives, ignore=("seed",))
    return [(rep.label, rows) for rep, rows in zip(representatives, groups.values(), strict=True)]


def aggregate_seeds(runs: list[RunRecord], table: pd.DataFrame) -> pd.DataFrame:
    """One row per variant (runs equal in every setting but the seed): a column per swept
    setting, n, and the mean and 95 % confidence half-width (Student t) of every numeric
    column of ``table``."""
    swept = [k for k in varying_keys(runs) if k != "seed"]
    numeric = [
        c
        for c in table.columns
        if pd.api.types.is_numeric_dtype(table[c]) and c not in swept and c != "seed"
    ]
    out = []
    for label, rows in variant_groups(runs):
        n = len(rows)
        row: dict[str, object] = {"variant": label, "n": n}
        row.update({key: _cell(runs[rows[0]].settings.get(key)) for key in swept})
        for column in numeric:
            values = table.loc[rows, column].to_numpy(dtype=float)
            row[column] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
            row[f"{column}_ci95"] = float(t_half_width(values[:, None])[0])
        out.append(row)
    return pd.DataFrame(out)
