"""The command line's parser: every command, its options and their one-line help."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

LISTABLE = (
    "algorithms",
    "models",
    "datasets",
    "partitions",
    "devices",
    "fading",
    "protocols",
    "schedulers",
    "power_controls",
    "allocations",
)
DESCRIBABLE = (
    "algorithm",
    "protocol",
    "scheduler",
    "section",
    "model",
    "dataset",
    "device",
    "fading",
    "partition",
)


MAX_LIST = 10_000
"""Most numbers one list argument may expand to (a sweep over more is a mistake)."""


def _ints(text: str) -> list[int]:
    """``0,3,7`` or ``0-2`` (inclusive) or a mix: ``0-2,5``; at most :data:`MAX_LIST`."""
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: give numbers, e.g. 0,3,7 or 0-2") from None
        if last < first:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r}: a range runs from low to high, e.g. {last}-{first}"
            )
        if len(out) + last - first + 1 > MAX_LIST:
            raise argparse.ArgumentTypeError(
                f"{text!r} names more than {MAX_LIST:,} numbers; give fewer"
            )
        out += range(first, last + 1)
    return out


class Parser(argparse.ArgumentParser):
    """argparse's parser with the mistake in one line (``mecsim compare: error: the following
    arguments are required: --out``) and where the options are, not a wall of usage with
    the error at its foot."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} ({self.prog} -h lists the options)\n")
        sys.exit(2)


Parents = tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]
"""Options several commands share: ``--import``, ``--set``, ``--device``."""


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The ``mecsim`` parser (``description``: the text above the command list)."""
    import mecsim

    parser = Parser(prog="mecsim", description=description)
    parser.add_argument("--version", action="version", version=f"mecsim {mecsim.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    shared = _shared_options()
    _add_run_and_validate(commands, shared)
    cmp = _add_compare(commands, shared)
    _add_compare_outputs(cmp)
    _add_inspection(commands, shared[0])
    parser.description = "Commands: " + ", ".join(commands.choices) + "."
    return parser


def _shared_options() -> Parents:
    plugins = argparse.ArgumentParser(add_help=False)
    plugins.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module (or .py file) that registers models, algorithms, datasets, "
        "devices or protocols first (repeatable)",
    )
    overrides = argparse.ArgumentParser(add_help=False)
    overrides.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set protocol.rounds=5 (repeatable)",
    )
    device = argparse.ArgumentParser(add_help=False)
    device.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="where models train"
    )
    return plugins, overrides, device


def _add_run_and_validate(commands: argparse._SubParsersAction, shared: Parents) -> None:
    plugins, overrides, device = shared
    run = commands.add_parser(
        "run", parents=[plugins, overrides, device], help="run a scenario and write a run directory"
    )
    run.add_argument("scenario", help="scenario TOML file")
    run.add_argument("--out", help="run directory (default: <output.dir>/<name>-seed<seed>)")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from its checkpoint (same scenario and --out)",
    )

    validate = commands.add_parser(
        "validate",
        parents=[plugins, overrides, device],
        help="check a scenario and report every problem",
    )
    validate.add_argument("scenario", help="scenario TOML file")
    validate.add_argument("--out", default=None, help="the run directory a run would write")
    validate.add_argument(
        "--simulate",
        action="store_true",
        help="also run the protocol in cost-only mode (nothing written): finds deadlines no "
        "round can meet, traces that leave no client online, runs where no update arrives",
    )


def _add_compare(commands: argparse._SubParsersAction, shared: Parents) -> argparse.ArgumentParser:
    """``compare``: its runs, and the sweep it may run first (locally or on Ray)."""
    plugins, overrides, device = shared
    cmp = commands.add_parser(
        "compare",
        parents=[plugins, overrides, device],
        help="compare run directories (or run a sweep first): time to target, speedups",
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
        help="sweep values of a key, e.g. --sweep clients.bandwidth_mhz=1,5,20; whole "
        "algorithms or protocols with their own keys: --sweep "
        "algorithm=ditto:lam=0.1,fedprox:mu=0.01 (repeatable; replaces [compare] sweep)",
    )
    cmp.add_argument(
        "--zip",
        action="store_true",
        help="pair the sweeps' i-th values instead of running every combination",
    )
    cmp.add_argument(
        "--seeds", type=_ints, metavar="S", help="run every point with each seed, e.g. 0,1,2 or 0-4"
    )
    cmp.add_argument(
        "--resume",
        action="store_true",
        help="skip points whose run finished and continue interrupted ones (same --out)",
    )
    cmp.add_argument(
        "-j", "--jobs", type=int, default=1, metavar="N", help="run N points at a time (default 1)"
    )
    cmp.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run each sweep point as a task on a Ray cluster (ADDRESS, e.g. auto or "
        "ray://head:10001; none: RAY_ADDRESS or a local instance); results are written here",
    )
    cmp.add_argument(
        "--ray-resources",
        default=None,
        metavar="NAME=AMOUNT,...",
        help="what each point's task asks of the cluster, e.g. num_cpus=2,num_gpus=0.5 "
        "(default num_cpus=1)",
    )
    return cmp


def _add_compare_outputs(cmp: argparse.ArgumentParser) -> None:
    """``compare``'s targets, output directory, baseline and figures."""
    cmp.add_argument(
        "--targets", help="accuracy targets, e.g. 0.4,0.8 (default: [compare] targets)"
    )
    cmp.add_argument(
        "--out", required=True, help="directory for the comparison (runs go in OUT/runs)"
    )
    cmp.add_argument(
        "--baseline",
        default=None,
        metavar="KEY=VALUE",
        help="speedups are over the run with this setting (VALUE read as TOML, as --set reads "
        "it) and every other one equal (default: protocol.kind=compute_and_wait where some "
        "runs use it, else the first run's value of the first swept setting)",
    )
    cmp.add_argument(
        "--x", metavar="KEY", help="plot --y against this swept numeric setting (metric.png)"
    )
    cmp.add_argument(
        "--y",
        default="time_to_0.8",
        metavar="COLUMN",
        help="a compare.csv column for --x; time_to_T is pm_time_T (default time_to_0.8)",
    )
    cmp.add_argument(
        "--gantt-clients",
        type=_ints,
        metavar="C",
        help="clients in the Gantt, e.g. 0,3,7 (default: the slowest of each run)",
    )
    cmp.add_argument(
        "--gantt-slowest",
        type=int,
        default=4,
        metavar="N",
        help="how many of the slowest clients the Gantt shows (default 4)",
    )
    cmp.add_argument(
        "--gantt-rounds",
        type=_ints,
        default=[0, 1, 2],
        metavar="R",
        help="rounds in the Gantt, e.g. 0-2 or 5,10 (default 0-2)",
    )
    cmp.add_argument(
        "--format",
        default="png",
        metavar="F",
        help="figure formats, e.g. png,svg,pdf (default png)",
    )


def _add_inspection(commands: argparse._SubParsersAction, plugins: argparse.ArgumentParser) -> None:
    """Commands that read runs and registries: report, check-run, check, describe, list."""
    rep = commands.add_parser(
        "report",
        parents=[plugins],
        help="cost tables across runs: time split, bytes, FLOPs, memory, layers",
    )
    rep.add_argument("runs", nargs="+", help="run directories")
    rep.add_argument("--out", default=None, help="directory for the tables (default: print only)")

    check_run = commands.add_parser(
        "check-run",
        parents=[plugins],
        help="check a run directory: its ledger (energy, air time, bytes, overlaps, totals), "
        "its physics in closed form, and a replay of its scenario",
    )
    check_run.add_argument("run_dir", help="a directory `mecsim run` wrote")
    check_run.add_argument(
        "--replay",
        choices=("auto", "full", "off"),
        default="auto",
        help="rerun the scenario and compare every figure: auto (cost-only, where the "
        "algorithm's payload does not depend on training), full (train as the run did), "
        "off",
    )

    check = commands.add_parser(
        "check",
        parents=[plugins],
        help="run the conformance suite on an algorithm or a radio policy (a plug-in's too): "
        "bytes, FLOPs, limits, serial = batched, cost-only",
    )
    check.add_argument(
        "algorithm",
        help="a registered algorithm, scheduling policy, power control or bandwidth allocation "
        "(mecsim list algorithms / schedulers / power_controls / allocations)",
    )

    describe = commands.add_parser(
        "describe",
        parents=[plugins],
        help="every key of an algorithm, protocol or section: type, default, range",
    )
    describe.add_argument("kind", choices=DESCRIBABLE, help="what to describe")
    describe.add_argument("name", help="e.g. ditto, wait_free, network, cnn-small, digits")

    listing = commands.add_parser("list", parents=[plugins], help="list registered names")
    listing.add_argument("kind", choices=LISTABLE, help="which registry")
