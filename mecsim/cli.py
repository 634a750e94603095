"""Command line: ``mecsim run | validate | list``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from mecsim.errors import MecsimError

LISTABLE = ("algorithms", "models", "datasets", "partitions", "devices", "fading", "protocols")


def _registry(kind: str):
    if kind == "algorithms":
        from mecsim.algorithms import ALGORITHMS as registry
    elif kind == "models":
        from mecsim.models import MODELS as registry
    elif kind == "datasets":
        from mecsim.data import DATASETS as registry
    elif kind == "partitions":
        from mecsim.data import PARTITIONS as registry
    elif kind == "devices":
        from mecsim.devices import DEVICES as registry
    elif kind == "fading":
        from mecsim.channels import FADING as registry
    else:
        from mecsim.protocols import PROTOCOLS as registry
    return registry


def _parser() -> argparse.ArgumentParser:
    import mecsim

    parser = argparse.ArgumentParser(prog="mecsim", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mecsim {mecsim.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a scenario and write a run directory")
    run.add_argument("scenario", help="scenario TOML file")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set protocol.rounds=5 (repeatable)",
    )
    run.add_argument("--out", help="run directory (default: <output.dir>/<name>-seed<seed>)")
    run.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where models train")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from its checkpoint (same scenario and --out)",
    )

    validate = commands.add_parser("validate", help="check a scenario and report every problem")
    validate.add_argument("scenario")
    validate.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE"
    )
    validate.add_argument("--out", default=None, help="the run directory a run would write")

    cmp = commands.add_parser(
        "compare", help="compare run directories (or run a sweep first): time to target, speedups"
    )
    cmp.add_argument("runs", nargs="*", help="run directories to compare")
    cmp.add_argument(
        "--scenario", help="run this scenario's sweep first ([compare] sweep or --sweep)"
    )
    cmp.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="sweep values of a key, e.g. --sweep protocol.kind=compute_and_wait,wait_free",
    )
    cmp.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    cmp.add_argument(
        "--targets", help="accuracy targets, e.g. 0.4,0.8 (default: [compare] targets)"
    )
    cmp.add_argument(
        "--out", required=True, help="directory for the comparison (runs go in OUT/runs)"
    )
    cmp.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    cmp.add_argument(
        "--baseline",
        default="protocol.kind=compute_and_wait",
        metavar="KEY=VALUE",
        help="speedups are over the run with this setting and every other one equal "
        "(default: protocol.kind=compute_and_wait)",
    )

    rep = commands.add_parser(
        "report", help="cost tables across runs: time split, bytes, FLOPs, memory, layers"
    )
    rep.add_argument("runs", nargs="+", help="run directories")
    rep.add_argument("--out", default=None, help="directory for the tables (default: print only)")

    describe = commands.add_parser(
        "describe", help="every key of an algorithm, protocol or section: type, default, range"
    )
    describe.add_argument("kind", choices=["algorithm", "protocol", "section"])
    describe.add_argument("name", help="e.g. ditto, wait_free, network")

    listing = commands.add_parser("list", help="list registered names")
    listing.add_argument("kind", choices=LISTABLE)
    return parser


class Terminated(BaseException):
    """SIGTERM (what job schedulers send), raised where the run is, like Ctrl-C."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code.

    0 ok; 2 bad input (one line naming the field); 1 an internal error (a bug:
    its traceback is saved to a file); 130 / 143 interrupted by SIGINT / SIGTERM,
    in which case nothing is written at the target.
    """
    args = _parser().parse_args(argv)
    # mecsim's own messages at INFO; other libraries' (torch's exit-time stats) from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("mecsim").setLevel(logging.INFO)
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        return _main(args)
    except (KeyboardInterrupt, Terminated) as stop:
        name = "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"
        sys.stderr.write(f"interrupted ({name}): stopped; nothing was written at the target\n")
        return 143 if isinstance(stop, Terminated) else 130
    except Exception:
        report = Path(tempfile.gettempdir()) / f"mecsim-crash-{os.getpid()}-{int(time.time())}.txt"
        report.write_text(traceback.format_exc())
        exc = sys.exc_info()[1]
        sys.stderr.write(
            f"internal error (a bug in mecsim, not your input): {type(exc).__name__}: {exc}; "
            f"traceback saved to {report}\n"
        )
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(args: argparse.Namespace) -> int:
    log = logging.getLogger("mecsim")
    try:
        if args.command == "describe":
            from mecsim.describe import render

            sys.stdout.write(render(args.kind, args.name))
            return 0
        if args.command == "list":
            for name, description in _registry(args.kind).describe().items():
                sys.stdout.write(f"{name:<20} {description}\n")
            return 0
        if args.command == "validate":
            from mecsim.scenario import apply_overrides, read_scenario_file, validate_scenario

            data = apply_overrides(read_scenario_file(args.scenario), args.overrides)
            scenario, problems = validate_scenario(data)
            for problem in problems:
                sys.stderr.write(f"error: {problem}\n")
            if problems:
                return 2
            from mecsim.runner import check_run

            check_run(scenario, args.out)  # every check run makes before any work
            sys.stdout.write(f"{args.scenario}: ok\n")
            return 0
        if args.command == "compare":
            return _compare(args)
        if args.command == "report":
            return _report(args)
        from mecsim.runner import run

        result = run(
            args.scenario,
            args.overrides,
            out=args.out,
            device=args.device,
            progress=False if args.no_progress else None,
            resume=args.resume,
        )
        s = result.summary
        log.info(
            "done: %d rounds, simulated %.2f s, wall %.2f s, generic acc %.4f, personalized acc %.4f -> %s",
            s["rounds"],
            s["sim_time_s"],
            s["wall_time_s"],
            s["final_generic_acc"],
            s["final_personal_acc"],
            result.run_dir,
        )
        return 0
    except MecsimError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2


def _report(args: argparse.Namespace) -> int:
    from mecsim.comparison import report

    if args.out is None:
        with tempfile.TemporaryDirectory() as tmp:
            markdown = report(args.runs, Path(tmp) / "report")
    else:
        from mecsim.errors import ConfigError

        if Path(args.out).exists():
            raise ConfigError("--out", f"{args.out} already exists; choose another directory")
        markdown = report(args.runs, args.out)
    sys.stdout.write(markdown)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mecsim.comparison import compare, run_sweep
    from mecsim.errors import ConfigError
    from mecsim.scenario import load_scenario, parse_override

    runs = [Path(r) for r in args.runs]
    targets = None
    if args.scenario:
        sweep = {}
        for item in args.sweep:
            key, raw = parse_override(item)
            values = (
                raw
                if isinstance(raw, list)
                else [parse_override(f"v={v}")[1] for v in str(raw).split(",")]
            )
            sweep[key] = values
        targets = load_scenario(args.scenario, args.overrides).compare.targets
        runs += run_sweep(
            args.scenario,
            args.overrides,
            sweep or None,
            Path(args.out) / "runs",
            device=args.device,
            progress=False,
        )
    elif args.sweep:
        raise ConfigError("--sweep", "needs --scenario SCENARIO to run")
    if not runs:
        raise ConfigError("runs", "give run directories or --scenario to compare")
    if args.targets:
        try:
            targets = [float(t) for t in args.targets.split(",")]
        except ValueError:
            raise ConfigError(
                "--targets", f"{args.targets!r}: give numbers, e.g. 0.4,0.8"
            ) from None
        if not all(0 <= t <= 1 for t in targets):
            raise ConfigError("--targets", "accuracy targets lie in [0, 1]")
    if "=" not in args.baseline:
        raise ConfigError(
            "--baseline", f"{args.baseline!r}: give KEY=VALUE, e.g. protocol.kind=compute_and_wait"
        )
    table = compare(
        runs, targets or [0.4, 0.8], Path(args.out) / "comparison", baseline=args.baseline
    )
    columns = ["run"] + [c for c in table.columns if c.startswith(("pm_time", "pm_speedup"))]
    sys.stdout.write(
        table[columns].to_string(index=False, float_format=lambda v: f"{v:.2f}") + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
