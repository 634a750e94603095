"""Command line: ``mecsim COMMAND`` (the commands and their one-line help: ``mecsim --help``)."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mecsim.commands.parser import build_parser
from mecsim.common import interrupts
from mecsim.common.errors import MecsimError


class Terminated(BaseException):
    """SIGTERM (what job schedulers send), raised where the run is, like Ctrl-C."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, raised where the run is: a KeyboardInterrupt that a signal really sent (a
    plug-in raising KeyboardInterrupt is told apart)."""


def _on_sigterm(signum, frame) -> None:
    raise interrupts.request(Terminated())  # kept, in case a weakref callback swallows it


def _on_sigint(signum, frame) -> None:
    raise interrupts.request(Interrupted())


def _stopped(stop: BaseException) -> int:
    """Say that a signal stopped the run; its exit code (130 SIGINT, 143 SIGTERM)."""
    interrupts.clear()
    name = "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"
    sys.stderr.write(f"interrupted ({name}): stopped; nothing was written at the target\n")
    return 143 if isinstance(stop, Terminated) else 130


def _quiet_swallowed_stop(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """A ``sys.unraisablehook`` that stays silent about a signal's stop raised inside a
    weakref callback or ``__del__`` (Python would print a traceback and drop it): the run
    raises it at its next round end (:mod:`mecsim.common.interrupts`). Anything else goes to
    ``previous``."""

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, (Interrupted, Terminated)):
            return
        previous(unraisable)

    return hook


def _plugin_failed(error: BaseException) -> int | None:
    """If ``error`` came from a plug-in's code, say so in one line (the traceback saved to
    a file) and return exit code 2; None when no plug-in frame raised it."""
    from mecsim.common.plugins import blame

    culprit, cause = None, error
    while culprit is None and cause is not None:  # SimPy re-raises a sub-process's error
        culprit = blame(cause.__traceback__)  # as a copy caused by the original
        cause = cause.__cause__
    if culprit is None:
        return None
    report = Path(tempfile.gettempdir()) / f"mecsim-plugin-{os.getpid()}-{int(time.time())}.txt"
    report.write_text("".join(traceback.format_exception(error)))
    what = (
        f"called sys.exit({error.code})"
        if isinstance(error, SystemExit)
        else f"raised {type(error).__name__}: {error}"
    )
    sys.stderr.write(
        f"error: plug-in code {culprit} {what}; fix the plug-in or leave it out "
        f"(nothing was written; traceback saved to {report})\n"
    )
    return 2


def _parse(argv: Sequence[str] | None) -> argparse.Namespace | None:
    """The command line's arguments; None (after one line) for a ``--set`` whose value
    came loose (``--set key 5``), which argparse would call an unrecognized argument."""
    parser = build_parser(__doc__)
    args, extra = parser.parse_known_args(argv)
    if extra:
        bare = next((o for o in getattr(args, "overrides", []) if "=" not in o), None)
        if bare is not None:
            sys.stderr.write(
                f"error: --set: {bare!r} has no value; write --set {bare}={extra[0]}\n"
            )
            return None
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code.

    0 ok; 2 bad input (one line naming the field) or a plug-in's failure (naming
    its module, function and line); 1 an internal error (a bug: its traceback is
    saved to a file); 130 / 143 interrupted by SIGINT / SIGTERM, in which case
    nothing is written at the target. Both signal handlers are installed here,
    also where the parent left SIGINT ignored (a script's background job).
    """
    args = _parse(argv)
    if args is None:
        return 2
    # mecsim's own messages at INFO; other libraries' (torch's exit-time stats) from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("mecsim").setLevel(logging.INFO)
    previous: dict[int, Any] = {}
    for number, handler in ((signal.SIGTERM, _on_sigterm), (signal.SIGINT, _on_sigint)):
        try:
            previous[number] = signal.signal(number, handler)
        except ValueError:  # not the main thread: leave signals alone
            break
    unraisable_hook = sys.unraisablehook
    if previous:
        sys.unraisablehook = _quiet_swallowed_stop(unraisable_hook)
    try:
        return _main(args)
    except BrokenPipeError:  # output piped into a reader that stopped early (| head)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush must not fail again
        return 141
    except (KeyboardInterrupt, Terminated, SystemExit) as stop:
        interrupts.clear()
        if not isinstance(stop, (Interrupted, Terminated)):  # raised by code, not a signal
            code = _plugin_failed(stop)
            if code is not None:
                return code
            if isinstance(stop, SystemExit):
                raise
        return _stopped(stop)
    except Exception as error:
        if interrupts.pending is not None:  # the signal's stop broke the code it landed in
            return _stopped(interrupts.pending)
        code = _plugin_failed(error)
        if code is not None:
            return code
        report = Path(tempfile.gettempdir()) / f"mecsim-crash-{os.getpid()}-{int(time.time())}.txt"
        report.write_text(traceback.format_exc())
        exc = sys.exc_info()[1]
        sys.stderr.write(
            f"internal error (a bug in mecsim, not your input): {type(exc).__name__}: {exc}; "
            f"traceback saved to {report}\n"
        )
        return 1
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = unraisable_hook


def _import_run_machinery() -> None:
    """Import the runner (torch, pandas, pydantic) with the cyclic garbage collector paused,
    then freeze what was imported out of its reach: those objects live as long as the
    process, and full collections sweeping them cost a run about 0.2 s."""
    gc.disable()
    try:
        import mecsim.runs.runner  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def _main(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; a :class:`MecsimError` is one line and exit 2."""
    try:
        if args.command in ("run", "compare"):
            _import_run_machinery()
        from mecsim.common.plugins import load_plugins

        load_plugins(args.imports)
        return COMMANDS[args.command](args)
    except MecsimError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2


def _describe(args: argparse.Namespace) -> int:
    from mecsim.commands.describe import render

    sys.stdout.write(render(args.kind, args.name))
    return 0


def _list(args: argparse.Namespace) -> int:
    from mecsim.commands.describe import registry_of

    for name, description in registry_of(args.kind).describe().items():
        sys.stdout.write(f"{name:<20} {description}\n")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from mecsim.config.scenario import apply_overrides, read_scenario_file, validate_scenario

    data = apply_overrides(read_scenario_file(args.scenario), args.overrides)
    scenario, problems = validate_scenario(data)
    for problem in problems:
        sys.stderr.write(f"error: {problem}\n")
    if problems:
        return 2
    from mecsim.runs.runner import check_run, resolve_device, run  # torch: only for a valid file

    resolve_device(args.device)  # cuda asked for where there is none
    check_run(scenario, args.out)  # every check run makes before any work
    if args.simulate:
        overrides = [*args.overrides, "execution.cost_only=true"]
        run(args.scenario, overrides, write=False, progress=False)
        sys.stdout.write(f"{args.scenario}: ok (its settings, and a cost-only run)\n")
        return 0
    sys.stdout.write(
        f"{args.scenario}: ok (its settings and the checks before a run; --simulate also "
        "runs it cost-only, which finds what only running shows: a deadline no round "
        "meets, an availability trace with no client online, a plug-in hook that raises)\n"
    )
    return 0


def _check_run(args: argparse.Namespace) -> int:
    from mecsim.analysis.invariants import render
    from mecsim.runs.replay import audit_run_dir

    checks = audit_run_dir(args.run_dir, args.replay)
    sys.stdout.write(render(checks))
    return 0 if all(c.ok for c in checks) else 1


def _run(args: argparse.Namespace) -> int:
    from mecsim.runs.runner import run

    result = run(
        args.scenario,
        args.overrides,
        out=args.out,
        device=args.device,
        progress=False if args.no_progress else None,
        resume=args.resume,
    )
    s = result.summary
    logging.getLogger("mecsim").info(
        "done: %d rounds, simulated %.2f s, wall %.2f s, generic acc %.4f, personalized acc %.4f -> %s",
        s["rounds"],
        s["sim_time_s"],
        s["wall_time_s"],
        s["final_generic_acc"],
        s["final_personal_acc"],
        result.run_dir,
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from mecsim.algorithms import ALGORITHMS
    from mecsim.commands.conformance import check_algorithm, render

    _import_run_machinery()
    if args.algorithm not in ALGORITHMS:
        from mecsim.commands.radio_conformance import CHECKS, kind_of
        from mecsim.policies.scheduling import SCHEDULERS

        suite = CHECKS.get(kind_of(args.algorithm) or "")
        if args.algorithm in SCHEDULERS:
            from mecsim.commands.policy_conformance import check_policy

            suite = check_policy
        if suite is not None:
            outcomes = suite(args.algorithm)
            sys.stdout.write(render(args.algorithm, outcomes))
            return 0 if all(o.ok for o in outcomes) else 1
    ALGORITHMS.get(args.algorithm)  # an unknown name: one line with the closest ones

    def progress(kind: str) -> None:
        sys.stderr.write(f"checking {args.algorithm} under {kind}\n")

    outcomes = check_algorithm(args.algorithm, progress)
    sys.stdout.write(render(args.algorithm, outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


def _report(args: argparse.Namespace) -> int:
    from mecsim.commands.comparison import report
    from mecsim.common.errors import ConfigError

    out = Path(args.out) if args.out is not None else _beside(Path(args.runs[0]), "report")
    if out.exists():
        raise ConfigError("--out", f"{out} already exists; choose another directory")
    markdown = report(args.runs, out)
    sys.stdout.write(markdown)
    if args.out is None:  # the tables printed; the HTML and the plots are in a folder
        logging.getLogger("mecsim").info("wrote %s (report.md, report.html and its plots)", out)
    return 0


def _beside(run: Path, what: str) -> Path:
    """A new folder next to ``run``: ``RUN-what``, ``RUN-what-2``, ... (the first free)."""
    base = run.resolve().parent / f"{run.resolve().name}-{what}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def _figures(args: argparse.Namespace):
    from mecsim.analysis.figures import FORMATS
    from mecsim.commands.comparison import Figures
    from mecsim.common.errors import ConfigError

    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ConfigError("--format", f"{args.format!r}: choose from {', '.join(FORMATS)}")
    if args.gantt_slowest < 1:
        raise ConfigError("--gantt-slowest", "show at least one client")
    return Figures(
        formats=formats,
        x=args.x,
        y=args.y,
        gantt_clients=args.gantt_clients,
        gantt_slowest=args.gantt_slowest,
        gantt_rounds=args.gantt_rounds,
    )


def _targets(text: str) -> list[float]:
    from mecsim.common.errors import ConfigError

    try:
        targets = [float(t) for t in text.split(",")]
    except ValueError:
        raise ConfigError("--targets", f"{text!r}: give numbers, e.g. 0.4,0.8") from None
    if not all(0 <= t <= 1 for t in targets):
        raise ConfigError("--targets", "accuracy targets lie in [0, 1]")
    return targets


def _compare(args: argparse.Namespace) -> int:
    from mecsim.commands.comparison import compare
    from mecsim.runs.output import check_target

    runs = [Path(r) for r in args.runs]
    out = Path(args.out)
    figures = _figures(args)
    targets = _targets(args.targets) if args.targets else None
    cluster = _check_compare_options(args, runs)
    check_target(out / "comparison", overwrite=args.resume)
    if args.scenario:
        swept, targets = _run_compare_sweep(args, out, figures, targets, cluster)
        runs += swept
    table = compare(
        runs,
        targets or [0.4, 0.8],
        out / "comparison",
        overwrite=args.resume,
        baseline=args.baseline,
        figures=figures,
    )
    columns = ["run"] + [c for c in table.columns if c.startswith(("pm_time", "pm_speedup"))]
    if table[["final_pm_acc", "final_gm_acc"]].isna().all().all():  # cost-only, no curve
        columns = ["run", "sim_time_s", "bytes_up", "bytes_down", "energy_j"]
    sys.stdout.write(
        table[columns].to_string(index=False, float_format=lambda v: f"{v:.2f}") + "\n"
    )
    return 0


def _check_compare_options(args: argparse.Namespace, runs: list[Path]):
    """Refuse contradictory ``compare`` options; return the Ray cluster ``--ray`` names."""
    from mecsim.common.errors import ConfigError

    if args.baseline is not None and "=" not in args.baseline:
        raise ConfigError(
            "--baseline", f"{args.baseline!r}: give KEY=VALUE, e.g. protocol.kind=compute_and_wait"
        )
    if not args.scenario and (args.sweep or args.seeds or args.zip or args.resume):
        raise ConfigError("--sweep", "sweeps, --seeds, --zip and --resume need --scenario")
    if not args.scenario and args.ray is not None:
        raise ConfigError("--ray", "--ray runs a sweep's points: give --scenario")
    cluster = _ray_cluster(args)
    if not runs and not args.scenario:
        raise ConfigError("runs", "give run directories or --scenario to compare")
    return cluster


def _run_compare_sweep(args, out: Path, figures, targets, cluster) -> tuple[list[Path], Any]:
    """Plan and check the scenario's sweep (figures included), then run it; return its run
    directories and the accuracy targets (the scenario's unless given)."""
    from mecsim.analysis.compare import comparison_columns, flatten
    from mecsim.commands.api import sweep_plan
    from mecsim.commands.comparison import check_figures
    from mecsim.commands.sweeps import parse_sweep, run_sweep

    given = dict(parse_sweep(item) for item in args.sweep)
    plan, base, sweep = sweep_plan(
        args.scenario,
        given,
        out,
        overrides=args.overrides,
        seeds=args.seeds or (),
        zip_axes=args.zip,
        resume=args.resume,
    )
    targets = targets or base.compare.targets
    check_figures(
        figures,
        comparison_columns(targets),
        sorted(set(flatten(base.model_dump(mode="json"))) | set(sweep) | {"seed"}),
    )
    swept = run_sweep(
        plan,
        jobs=args.jobs,
        resume=args.resume,
        imports=args.imports,
        device=args.device,
        ray=cluster,
    )
    return swept, targets


def _ray_cluster(args: argparse.Namespace):
    """The cluster ``--ray`` names (None: points run on this machine)."""
    from mecsim.commands.ray_sweeps import RayCluster, parse_resources
    from mecsim.common.errors import ConfigError

    if args.ray is None:
        if args.ray_resources is not None:
            raise ConfigError(
                "--ray-resources",
                "asks a Ray cluster for resources, but the points run here: add --ray "
                "[ADDRESS] or drop --ray-resources",
            )
        return None
    if args.ray_resources is None:
        return RayCluster(args.ray or None)  # its default: one CPU a point
    return RayCluster(args.ray or None, parse_resources(args.ray_resources))


def _nothing_left_to_finish() -> bool:
    """No exit-time work pending: no other non-daemon thread, no child process, no Ray."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return False
    if "ray" in sys.modules:  # its shutdown hook stops the local cluster's processes
        return False
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is None or not multiprocessing.active_children()


def entry() -> None:
    """Console entry point (``mecsim``, ``python -m mecsim``): :func:`main`, then exit.

    Every file mecsim writes is closed by the time :func:`main` returns, so
    when nothing else is pending the process ends at once instead of tearing
    the interpreter down (freeing torch's and pandas' module state costs
    0.3-0.5 s per command).
    """
    code = main()
    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = 141
    if _nothing_left_to_finish():
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run,
    "validate": _validate,
    "compare": _compare,
    "report": _report,
    "check-run": _check_run,
    "check": _check,
    "describe": _describe,
    "list": _list,
}
"""Each command's function: it returns the exit code."""
