"""Settings that name a file or a directory, and making them absolute.

A relative path in a scenario file is relative to the file (``clients.table``,
``clients.mobility.trace``: see :func:`mecsim.config.scenario.read_scenario_file`) or to
the working directory; one given with ``--set`` or in a mapping is relative to the
working directory. A loaded scenario holds them absolute, so ``scenario.resolved.toml``
names the same file from anywhere, a checkpoint's digest does not depend on the
spelling, and a Ray task finds the driver's files.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

BESIDE_THE_FILE = (("clients", "table"), ("clients", "mobility", "trace"))
"""File settings that a scenario file names relative to its own folder."""
FILE_KEYS = (*BESIDE_THE_FILE, ("faults", "availability"), ("data", "root"))


def absolute_file_paths(
    data: dict[str, Any],
    keys: Sequence[tuple[str, ...]] = FILE_KEYS,
    base: str | os.PathLike[str] = "",
) -> dict[str, Any]:
    """A copy of the scenario mapping ``data`` with the paths of ``keys`` absolute, a
    relative one read from ``base`` (default: the working directory)."""
    data = copy.deepcopy(data)
    for *tables, key in keys:
        holder: Any = data
        for name in tables:
            holder = holder.get(name) if isinstance(holder, dict) else None
        value = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(value, str) and value:
            holder[key] = os.path.abspath(os.path.join(base, value))
    return data
