"""Per-client attributes from a CSV file (``clients.table``): measured device and network
traces instead of distributions.

Columns (each optional but at least one): ``distance_m``, ``bandwidth_mhz``,
``tx_power_dbm``, ``device`` (a registered device name), ``x_m`` and ``y_m``
(a position, both or neither) and, in cost-only runs, ``num_samples``; an
optional ``client`` column (0..N-1) orders the rows.
One row per client: the table sets ``clients.count``. A column given replaces
the scenario's value or distribution for that attribute; the others still
come from the scenario.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

RANGES = {
    "distance_m": (0.0, 1e6, True),
    "bandwidth_mhz": (0.0, 1e5, True),
    "tx_power_dbm": (-50.0, 60.0, False),
    "num_samples": (1.0, 1e9, False),
    "x_m": (-1e6, 1e6, False),
    "y_m": (-1e6, 1e6, False),
}
"""(low, high, low exclusive) of each numeric column: physically sensible bounds."""
COLUMNS = ("client", *RANGES, "device")


def out_of_range(key: str, values: np.ndarray) -> np.ndarray:
    """Indices of ``values`` that are not finite or fall outside ``RANGES[key]``."""
    low, high, exclusive = RANGES[key]
    values = np.asarray(values, dtype=float)
    below = (values <= low) if exclusive else (values < low)
    return np.flatnonzero(~np.isfinite(values) | (values > high) | below)


def range_text(key: str) -> str:
    """``RANGES[key]`` as an interval: ``(0, 1e+06]``."""
    low, high, exclusive = RANGES[key]
    return f"({low:g}, {high:g}]" if exclusive else f"[{low:g}, {high:g}]"


def read_client_table(path: str | Path) -> pd.DataFrame:
    """The checked table, one row per client in client order; raises ValueError with one
    line naming the file, the row and the column."""
    path = Path(path)
    stat = path.stat() if path.is_file() else None
    if stat is None:
        raise ValueError(f"file not found: {path}")
    return _read(str(path.resolve()), stat.st_mtime_ns, stat.st_size).copy()


@lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    import pandas as pd  # only runs with a client table pay for importing pandas here

    try:
        table = pd.read_csv(path, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a CSV table: {error}") from None
    table.columns = [str(c).strip() for c in table.columns]
    for column in table.columns:
        if column not in COLUMNS:
            near = difflib.get_close_matches(column, COLUMNS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(COLUMNS)}"
            raise ValueError(f"{path}: unknown column {column!r}{hint}")
    if len(table) == 0 or not set(table.columns) - {"client"}:
        raise ValueError(f"{path}: give at least one row and one attribute column")
    if ("x_m" in table) != ("y_m" in table):
        raise ValueError(f"{path}: a position needs both columns x_m and y_m")
    if "client" in table:
        ids = pd.to_numeric(table["client"], errors="coerce")
        if sorted(ids.tolist()) != list(range(len(table))):
            raise ValueError(f"{path}: column client must number the rows 0..{len(table) - 1}")
        table = table.assign(client=ids.astype(int)).sort_values("client")
    for column in RANGES:
        if column not in table:
            continue
        values = pd.to_numeric(table[column], errors="coerce").to_numpy(float)
        bad = out_of_range(column, values)
        if len(bad):
            row = int(bad[0])
            raise ValueError(
                f"{path}: client {row}: {column} = {table[column].iloc[row]} must lie in "
                f"{range_text(column)}"
            )
        if column == "num_samples" and (values != np.floor(values)).any():
            row = int(np.flatnonzero(values != np.floor(values))[0])
            raise ValueError(
                f"{path}: client {row}: num_samples = {table[column].iloc[row]} is not a whole "
                "number of samples"
            )
        table[column] = values
    if "device" in table:
        names = table["device"].astype(str).str.strip()
        empty = np.flatnonzero(table["device"].isna().to_numpy() | (names == "").to_numpy())
        if len(empty):
            raise ValueError(
                f"{path}: client {int(empty[0])}: the device cell is empty; name a registered "
                "device (mecsim list devices) or drop the column"
            )
        table["device"] = names
    return table.reset_index(drop=True)
