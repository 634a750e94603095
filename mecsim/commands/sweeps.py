"""Sweeps: a grid (or zip) of scenario settings, crossed with explicit runs and seeds.

A sweep is a list of *axes*; an axis is a list of points, and a point is a
mapping of dotted keys to values. ``--sweep clients.bandwidth_mhz=1,5,20`` is
one axis of three points. The keys ``algorithm`` and ``protocol`` take whole
choices, ``NAME[:key=value[:key=value...]]``, so one axis can mix
algorithm-specific settings: ``--sweep algorithm=ditto:lam=0.1,fedprox:mu=0.01``.
When a point chooses another algorithm (or protocol) than the scenario's, the
scenario's settings that the new one does not have are dropped first.

Every point is validated and every run directory checked before the first
run starts. Folder names come from the swept keys (``bandwidth_mhz=5__seed=1``).
``resume`` skips points whose run directory is complete and continues
interrupted ones from their checkpoints; ``jobs`` runs points in parallel
processes.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import tomllib

from mecsim.commands.ray_sweeps import RayCluster, run_on_ray
from mecsim.common.errors import ConfigError, MecsimError
from mecsim.config.scenario import Scenario, apply_overrides, load_scenario, parse_override

log = logging.getLogger(__name__)

Point = dict[str, Any]
"""Dotted scenario key -> value."""

CHOOSERS = {"algorithm": "name", "protocol": "kind"}
"""Tables whose settings depend on a choice, and the key that makes it."""


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split at ``separator`` outside brackets, braces and quotes (so inline tables and
    arrays stay whole)."""
    parts, depth, quote, start = [], 0, "", 0
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _value(text: str) -> Any:
    return parse_override(f"v={text}")[1]


def _choice(table: str, value: Any) -> Point:
    """A whole choice for ``algorithm`` / ``protocol``: ``"ditto:lam=0.1"`` or a table."""
    chooser = CHOOSERS[table]
    if isinstance(value, dict):
        if chooser not in value:
            raise ConfigError(f"--sweep {table}", f"{value} names no {table}.{chooser}")
        return {f"{table}.{k}": v for k, v in value.items()}
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"--sweep {table}", f"{value!r}: give NAME[:key=value...], e.g. ditto:lam=0.1"
        )
    name, *settings = split_top_level(value, ":")
    point: Point = {f"{table}.{chooser}": name}
    for setting in settings:
        if "=" not in setting:
            raise ConfigError(
                f"--sweep {table}", f"{setting!r} in {value!r}: give key=value, e.g. lam=0.1"
            )
        key, raw = (s.strip() for s in setting.split("=", 1))
        point[f"{table}.{key}"] = _value(raw)
    return point


def axis(key: str, values: Sequence[Any]) -> list[Point]:
    """The points of one swept key (``algorithm`` / ``protocol``: whole choices)."""
    if not isinstance(values, (list, tuple)) or not values:
        raise ConfigError(f"compare.sweep.{key}", "give a non-empty list of values")
    if key in CHOOSERS:
        return [_choice(key, v) for v in values]
    return [{key: v} for v in values]


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,...`` (or ``KEY=[V1, V2]``) -> (key, values); commas inside inline
    tables, arrays and quotes do not split."""
    if "=" not in text:
        raise ConfigError("--sweep", f"{text!r}: give KEY=V1,V2, e.g. clients.bandwidth_mhz=1,5")
    key, raw = (part.strip() for part in text.split("=", 1))
    if key in CHOOSERS:  # values are NAME:key=value choices, kept as text
        return key, split_top_level(raw)
    whole = _value(raw)
    if isinstance(whole, list):
        return key, whole
    return key, [_value(v) for v in split_top_level(raw)]


def expand(
    axes: Sequence[list[Point]],
    runs: Sequence[Point] = (),
    seeds: Sequence[int] = (),
    mode: str = "grid",
) -> list[Point]:
    """Every point: the axes combined (``grid``: every combination; ``zip``: the i-th
    value of each), crossed with ``runs`` and then ``seeds``."""
    if mode == "zip":
        lengths = {len(a) for a in axes}
        if len(lengths) > 1:
            raise ConfigError(
                "compare.mode", f"zip needs sweeps of equal length, got {sorted(lengths)}"
            )
        combos = list(zip(*axes, strict=True)) if axes else [()]
    elif mode == "grid":
        combos = list(itertools.product(*axes))
    else:
        raise ConfigError("compare.mode", f"{mode!r}: choose grid or zip")
    points = [{k: v for part in combo for k, v in part.items()} for combo in combos]
    points = [p | extra for p in points for extra in (runs or [{}])]
    return [p | {"seed": s} for p in points for s in seeds] if seeds else points


def apply_point(data: dict[str, Any], point: Point) -> dict[str, Any]:
    """``data`` with the point's settings; a point that chooses another algorithm or
    protocol first drops the settings the new choice does not have."""
    from mecsim.commands.describe import settings_of

    data = dict(data)
    for table, chooser in CHOOSERS.items():
        chosen = point.get(f"{table}.{chooser}")
        current = data.get(table, {})
        if chosen is None or not isinstance(current, dict) or chosen == current.get(chooser):
            continue
        try:
            fields = settings_of(table, chosen)[0].model_fields
        except ConfigError:
            continue  # validation names the unknown choice
        data[table] = {k: v for k, v in current.items() if k in fields}
    return apply_overrides(data, point)


def _text(value: Any) -> str:
    """A value as folder-name text: ``{dist="uniform", low=1}`` -> ``dist-uniform_low-1``."""
    if isinstance(value, dict):
        return "_".join(f"{k}-{_text(v)}" for k, v in sorted(value.items()))
    if isinstance(value, list):
        return "-".join(_text(v) for v in value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return re.sub(r"[^A-Za-z0-9.+-]", "_", str(value))


MAX_NAME = 120
"""Longest folder name built from the keys; longer ones are cut and get a digest."""


def _digest(point: Point) -> str:
    return hashlib.sha1(repr(sorted(point.items())).encode()).hexdigest()[:8]


def _short_key(key: str) -> str:
    """``algorithm.name`` -> ``algorithm``, ``protocol.kind`` -> ``protocol``, else the
    key's last part."""
    table, _, rest = key.partition(".")
    return table if CHOOSERS.get(table) == rest else key.split(".")[-1]


def point_names(points: list[Point], default: str) -> list[str]:
    """A folder name per point: ``key=value`` joined by ``__``.

    A key is shown by its last part (``algorithm.name`` / ``protocol.kind`` by
    their table), or in full where two of a point's keys share it. Two points
    that are the same run are refused; two different points whose names would
    collide (``a b`` and ``a_b``), or a name too long for a folder, get a
    digest of the point appended, so names never collide.
    """
    names = []
    for point in points:
        short = [_short_key(k) for k in point]
        parts = [
            f"{tail if short.count(tail) == 1 else key}={_text(value)}"
            for key, tail, value in zip(point, short, point.values(), strict=True)
        ]
        names.append("__".join(parts) or default)
    seen: dict[str, int] = {}
    for index, point in enumerate(points):
        first = seen.setdefault(names[index], index)
        if first != index and points[first] == point:
            raise ConfigError(
                "compare.sweep",
                f"sweep points {points[first]} and {point} are the same run "
                f"({names[index]}); remove one",
            )
    counts = {n: names.count(n) for n in names}
    return [
        f"{name[: MAX_NAME - 10]}__{_digest(point)}"
        if counts[name] > 1 or len(name) > MAX_NAME
        else name
        for name, point in zip(names, points, strict=True)
    ]


@dataclass
class SweepPlan:
    """The checked points of a sweep and where each run goes."""

    data: list[dict[str, Any]]
    """Each point's scenario mapping (the point applied)."""
    names: list[str]
    dirs: list[Path]
    done: list[bool]
    """Points whose run directory is complete (``resume`` skips them)."""

    def __len__(self) -> int:
        return len(self.names)


def _comparable(scenario: Scenario) -> dict[str, Any]:
    data = scenario.model_dump(mode="json", exclude_none=True)
    return {k: v for k, v in data.items() if k not in ("output", "versions", "compare")}


def _check_finished(run_dir: Path, scenario: Scenario) -> None:
    """Refuse ``run_dir`` unless it is a finished run of ``scenario``."""
    resolved = run_dir / "scenario.resolved.toml"
    if not (run_dir / "summary.json").is_file() or not resolved.is_file():
        raise ConfigError(
            "--resume", f"{run_dir} exists but is not a finished mecsim run; remove it"
        )
    written = tomllib.loads(resolved.read_text())
    written.pop("versions", None)
    if _comparable(load_scenario(written)) != _comparable(scenario):
        raise ConfigError(
            "--resume",
            f"{run_dir} holds a run of different settings than this sweep point; "
            "choose another --out or remove it",
        )


def plan_sweep(
    data: dict[str, Any],
    axes: Sequence[list[Point]],
    runs_dir: Path,
    *,
    mode: str = "grid",
    resume: bool = False,
) -> SweepPlan:
    """Expand ``data``'s sweep (``axes``, crossed with ``[compare] runs`` and ``seeds``),
    validate every point and check every run directory, before any run."""
    from mecsim.runs.output import check_target

    base = load_scenario(data)
    points = expand(axes, base.compare.runs, base.compare.seeds, mode)
    names = point_names(points, base.name)
    plan = SweepPlan([], names, [], [])
    for point, name in zip(points, names, strict=True):
        point_data = apply_point(data, point)
        scenario = load_scenario(point_data)  # every point valid before the first run
        out = runs_dir / name
        done = out.exists()
        if done and resume:
            _check_finished(out, scenario)
        elif done:
            raise ConfigError(
                "--out",
                f"{out} already exists; add --resume to skip finished points, or choose "
                "another --out",
            )
        else:
            check_target(out, scenario.output.overwrite)
        plan.data.append(point_data)
        plan.dirs.append(out)
        plan.done.append(done)
    return plan


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _run_point(data: dict[str, Any], out: str, options: dict[str, Any]) -> str:
    """Run one point (in this process or a worker); resume it if a checkpoint waits."""
    from mecsim.engine.checkpoint import checkpoint_path
    from mecsim.runs.runner import run

    resume = options.pop("resume", False) and checkpoint_path(Path(out)).is_file()
    try:
        run(data, out=out, resume=resume, **options)
    except MecsimError as error:  # re-raised in the parent as one line
        raise ConfigError("sweep", f"{Path(out).name}: {error}") from None
    return out


def _exit_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """End this worker once the process that started it is gone: a parent killed with
    SIGKILL runs no clean-up, and its workers would otherwise go on for the whole sweep."""
    while os.getppid() == parent:
        time.sleep(poll_s)
    os._exit(1)


def _worker_start(
    imports: Sequence[str], threads: int, parent: int | None = None, workers: int = 1
) -> None:
    import torch

    from mecsim.commands.cli import _on_sigterm  # a point stops as a foreground run does
    from mecsim.common.plugins import load_plugins

    if parent is not None:
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    signal.signal(signal.SIGTERM, _on_sigterm)
    import mecsim.common.threads

    mecsim.common.threads.workers = workers
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(threads)
    load_plugins(imports)


def run_sweep(
    plan: SweepPlan,
    *,
    jobs: int = 1,
    resume: bool = False,
    imports: Sequence[str] = (),
    ray: RayCluster | None = None,
    **run_options: Any,
) -> list[Path]:
    """Run the points of ``plan`` not yet done (``jobs`` at a time, each in its own
    process when ``jobs`` > 1; or as Ray tasks on ``ray``, see :mod:`mecsim.commands.ray_sweeps`),
    logging ``[i/N]``, elapsed and estimated time left."""
    if jobs < 1:
        raise ConfigError("-j", f"{jobs}: run at least one point at a time")
    if ray is not None and jobs != 1:
        raise ConfigError(
            "-j", "--ray runs as many points at once as the cluster has resources for; drop -j"
        )
    todo = [i for i, done in enumerate(plan.done) if not done]
    total = len(plan)
    skipped = total - len(todo)
    if skipped:
        log.info("resume: %d of %d points already finished", skipped, total)
    options = run_options | {"resume": resume, "progress": False}
    start = time.monotonic()
    finished = skipped

    def report(index: int) -> None:
        nonlocal finished
        finished += 1
        elapsed = time.monotonic() - start
        left = elapsed / (finished - skipped) * (total - finished)
        log.info(
            "[%d/%d] %s done; elapsed %s, about %s left",
            finished,
            total,
            plan.names[index],
            _clock(elapsed),
            _clock(left),
        )

    if ray is not None:
        points = [(plan.data[i], plan.dirs[i]) for i in todo]
        run_on_ray(points, ray, dict(options), imports, lambda k: report(todo[k]))
        return plan.dirs
    if jobs == 1 or len(todo) <= 1:
        for index in todo:
            log.info("[%d/%d] running %s", finished + 1, total, plan.names[index])
            _run_point(plan.data[index], str(plan.dirs[index]), dict(options))
            report(index)
        return plan.dirs
    _run_in_processes(plan, todo, jobs, imports, options, report)
    return plan.dirs


def _run_in_processes(
    plan: SweepPlan,
    todo: list[int],
    jobs: int,
    imports: Sequence[str],
    options: dict[str, Any],
    report: Callable[[int], None],
) -> None:
    """Run the points ``todo`` in ``jobs`` spawned processes; the first failure stops the
    sweep (the points not started are cancelled)."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=_worker_start,
        initargs=(list(imports), threads, os.getpid(), jobs),
    ) as pool:
        futures = {
            pool.submit(_run_point, plan.data[i], str(plan.dirs[i]), dict(options)): i for i in todo
        }
        log.info("running %d points, %d at a time", len(todo), jobs)
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in done:
                    future.result()  # the first failure stops the sweep
                    report(futures[future])
        except BaseException as stop:
            for future in pending:
                future.cancel()
            if not isinstance(stop, Exception):  # a signal: the running points stop too
                _stop_workers(pool)
            raise


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Send each worker SIGTERM: its point stops where it is and writes nothing, as a run
    in the foreground does (else the pool's shutdown waits for the points under way)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
