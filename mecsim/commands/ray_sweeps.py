"""Sweep points as Ray tasks: ``mecsim compare --scenario S --ray [ADDRESS]``.

Each point runs as one Ray task (one CPU by default; ``--ray-resources``
asks for more, or a GPU share) in a scratch directory on whichever node Ray
chooses. The task returns the run directory's files and the driver writes
them, atomically, where a local sweep would have: the output location is the
driver's, so the nodes need no shared disk for results. The tables are the
ones a local ``-j 1`` sweep writes (the runs are the same seeded runs).

Faults: Ray re-runs a task whose node died (``max_retries``), from the
start, on another node; a point that stops with a mecsim error stops the
sweep with one line, as locally. Points whose run directory is complete are
skipped on ``--resume``; a point interrupted with a checkpoint at the
driver's output location is continued from it (the checkpoint travels with
the task).

What the nodes need: mecsim and its dependencies, the plug-in modules
(``--import``) and every file a scenario names (``clients.table``,
``faults.availability``, ``data.root``) at the same absolute path; the
driver makes those paths absolute before shipping a point.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecsim.common.errors import ConfigError, MecsimError
from mecsim.common.file_keys import absolute_file_paths
from mecsim.executors.ray_backend import RAY_NAMES, connect, job_error

log = logging.getLogger(__name__)

TASK_RETRIES = 3
"""Times Ray re-runs a point whose node or worker process died."""
RESOURCE_KEYS = frozenset(RAY_NAMES)
"""``--ray-resources`` keys Ray takes directly; any other name is a custom resource."""


@dataclass(frozen=True)
class RayCluster:
    """Where sweep points run: a Ray address (None: ``RAY_ADDRESS``, a running local
    cluster, else a new local instance) and what each point's task asks for."""

    address: str | None = None
    resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1.0})

    def options(self) -> dict[str, Any]:
        """The task options: Ray's own keys as given, the rest as custom resources."""
        direct = {k: v for k, v in self.resources.items() if k in RESOURCE_KEYS}
        custom = {k: v for k, v in self.resources.items() if k not in RESOURCE_KEYS}
        return {**direct, **({"resources": custom} if custom else {}), "max_retries": TASK_RETRIES}


def parse_resources(text: str) -> dict[str, float]:
    """``num_cpus=2,num_gpus=0.5,accelerator=1`` -> a resources mapping."""
    resources: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not sep or not key.strip() or not 0 <= value < math.inf:  # nan, inf: refused
            raise ConfigError(
                "--ray-resources",
                f"{item!r}: give NAME=AMOUNT pairs, e.g. num_cpus=1,num_gpus=0.5",
            )
        resources[key.strip()] = value
    if not resources:
        raise ConfigError("--ray-resources", "give at least one NAME=AMOUNT, e.g. num_cpus=1")
    return resources


def run_point_task(
    data: dict[str, Any],
    name: str,
    options: dict[str, Any],
    imports: Sequence[str],
    checkpoint: bytes | None,
) -> dict[str, bytes]:
    """Run one point in a scratch directory (resuming ``checkpoint`` if given) and
    return its run directory's files, by path relative to it."""
    from mecsim.common.plugins import load_plugins
    from mecsim.engine.checkpoint import checkpoint_path
    from mecsim.runs.output import MARKER, OWNER
    from mecsim.runs.runner import run

    load_plugins(imports)
    scratch = Path(tempfile.mkdtemp(prefix="mecsim-point-"))
    try:
        out = scratch / name
        if checkpoint is not None:
            checkpoint_path(out).write_bytes(checkpoint)
        try:
            run(data, out=out, resume=checkpoint is not None, **options)
        except MecsimError as error:  # one line at the driver, as a local sweep says it
            raise ConfigError("sweep", f"{name}: {error}") from None
        return {
            str(path.relative_to(out)): path.read_bytes()
            for path in sorted(out.rglob("*"))
            if path.is_file() and path.name not in (MARKER, OWNER)
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_point(run_dir: Path, files: dict[str, bytes]) -> None:
    """Write a point's files as ``run_dir``, atomically (nothing half-written)."""
    from mecsim.engine.checkpoint import checkpoint_path
    from mecsim.runs.output import atomic_directory

    with atomic_directory(run_dir) as tmp:
        for relative, content in files.items():
            target = tmp / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    checkpoint_path(run_dir).unlink(missing_ok=True)  # the point finished


def run_on_ray(
    points: Sequence[tuple[dict[str, Any], Path]],
    cluster: RayCluster,
    options: dict[str, Any],
    imports: Sequence[str],
    on_done: Callable[[int], None],
) -> None:
    """Run ``points`` ((scenario mapping, run directory) pairs) as Ray tasks, writing
    each one's directory as it finishes and calling ``on_done`` with its index; the
    first failing point cancels the rest and raises."""
    from mecsim.engine.checkpoint import checkpoint_path

    ray = connect(cluster.address, "--ray", "--ray", None, cluster.resources, "--ray-resources")
    task = ray.remote(run_point_task).options(**cluster.options())
    resume = options.pop("resume", False)
    refs = {}
    for index, (data, run_dir) in enumerate(points):
        saved = checkpoint_path(run_dir)
        checkpoint = saved.read_bytes() if resume and saved.is_file() else None
        ref = task.remote(
            absolute_file_paths(data), run_dir.name, options, list(imports), checkpoint
        )
        refs[ref] = index
    log.info("running %d points as Ray tasks", len(refs))
    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            index = refs.pop(ready[0])
            try:
                files = ray.get(ready[0])
            except ray.exceptions.RayTaskError as error:
                raise job_error(error) from None
            write_point(points[index][1], files)
            on_done(index)
    finally:
        for ref in refs:
            ray.cancel(ref, force=True)
