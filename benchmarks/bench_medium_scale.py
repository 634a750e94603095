"""The shared medium at city scale: seconds per round against clients, cells and participation.

Each measurement is a process of its own: ``mecsim.run`` of a cost-only FedAvg
scenario (``steps = 5``, 100 samples per client, compute-and-wait rounds) over
hexagonal cells 600 m apart (7 = one ring, 19 = two, 37 = three; reuse 1, so
every transmission interferes with every other cell's), clients uniform over the
cells' bounding box, static or moving (random waypoint at 10-30 m/s: positions
every coherence block, handovers with their breaks). For each run it prints the
wall seconds per round, the medium's change points per second (rows of the
events table per second, a proxy), the peak RSS, and for each (engine, cells,
participation, mobility) the growth exponent of seconds per round fitted over
the client counts (least squares on log-log).

    python benchmarks/bench_medium_scale.py                                  # 1k, 2k, 5k clients, 7 cells, all on the air
    python benchmarks/bench_medium_scale.py --clients 10000 --rounds 1       # the issue-52 case
    python benchmarks/bench_medium_scale.py --clients 1000 10000 100000 --cells 19 \\
        --participation 0.1 --mobility random_waypoint --rounds 10
    python benchmarks/bench_medium_scale.py --engine event stepping          # both engines side by side

Seconds per round are a round's own: before the clock each process runs a 300-client
round of the same case twice, untimed, which imports numba and loads (or compiles, on a
cold cache) the medium's compiled loops; ``start s`` is the first of those runs less the
second, the process's one-time start-up (~0.5 s: numba's import and its code loaded
from the cache), which any run of a process pays once. ``--cold`` times each case as a
fresh process's first run instead, start-up included (then an untimed 300-client round
per mobility model first fills numba's cache, ``--no-warm`` skips it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import time

import numpy as np
from _child import run_child

CHILD = """
import json, resource, sys, time
import mecsim
clients, rounds, part, model, engine = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                                        sys.argv[4], sys.argv[5])
cells, cold = json.loads(sys.argv[6]), sys.argv[7] == "1"
xs, ys = [x for x, _ in cells], [y for _, y in cells]


def scenario(count, rounds):
    clients_cfg = {"count": count, "num_samples": 100,
                   "x_m": {"dist": "uniform", "low": min(xs) - 400, "high": max(xs) + 400},
                   "y_m": {"dist": "uniform", "low": min(ys) - 400, "high": max(ys) + 400}}
    if model != "static":
        clients_cfg["mobility"] = {"model": model, "speed_mps": [10, 30]}
    return {
        "name": "bench-medium-scale", "seed": 0,
        "data": {"dataset": "digits"}, "model": {"name": "cnn-small"},
        "algorithm": {"name": "fedavg", "steps": 5},
        "protocol": {"kind": "compute_and_wait", "rounds": rounds, "participation": part},
        "network": {"cells": [{"x_m": x, "y_m": y} for x, y in cells], "medium": engine},
        "clients": clients_cfg,
        "execution": {"cost_only": True},
        "output": {"progress": False},
    }


def seconds(count, rounds):
    started = time.perf_counter()
    result = run(scenario(count, rounds), write=False)
    return time.perf_counter() - started, result


run = mecsim.run  # imports the engine
import mecsim.analysis  # and the tables' summaries (imported at a run's end otherwise)
start_s = None
if not cold:  # the process's one-time start-up (numba, compiled loops loaded), untimed
    first, _ = seconds(300, 1)
    start_s = first - seconds(300, 1)[0]
run_s, result = seconds(clients, rounds)
e = result.events
print(json.dumps({"run_s": run_s, "rows": len(e), "sim_s": float(e["t_end"].max()),
                  "start_s": start_s,
                  "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
"""


def hexagon(cells: int, spacing_m: float = 600.0) -> list[tuple[float, float]]:
    """The centres of ``cells`` hexagonal cells (1, 7, 19, 37: whole rings) around the origin."""
    rings = {1: 0, 7: 1, 19: 2, 37: 3}
    if cells not in rings:
        raise SystemExit(f"--cells: one of {sorted(rings)} (whole hexagonal rings)")
    centres = []
    n = rings[cells]
    for q in range(-n, n + 1):
        for r in range(max(-n, -q - n), min(n, -q + n) + 1):
            x = spacing_m * (q + r / 2)
            y = spacing_m * r * math.sqrt(3) / 2
            centres.append((round(x, 6), round(y, 6)))
    return centres


def exponent(ns: list[int], seconds: list[float]) -> float:
    """The slope of log(seconds) against log(clients)."""
    return float(np.polyfit(np.log(ns), np.log(seconds), 1)[0])


def warm(models: list[str]) -> None:
    """One untimed small round per mobility model before ``--cold`` runs: the event
    medium's loops are compiled on first use and cached beside their source, so a fresh
    checkout (or a checkout of another tree, which invalidates the cache) would otherwise
    time 1-2 s of compilation into its first case."""
    started = time.perf_counter()
    for model in models:
        run_child(CHILD, "300", "1", "1.0", model, "event", json.dumps(hexagon(7)), "1")
    print(f"(compiled loops warmed in {time.perf_counter() - started:.1f} s, not timed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1000, 2000, 5000])
    parser.add_argument("--cells", type=int, nargs="+", default=[7])
    parser.add_argument("--participation", type=float, nargs="+", default=[1.0])
    parser.add_argument("--mobility", nargs="+", default=["static", "random_waypoint"],
                        choices=["static", "random_waypoint"])  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--engine", nargs="+", default=["event"], choices=["event", "stepping"])
    parser.add_argument("--cold", action="store_true",
                        help="time each case as a fresh process's first run, its one-time "
                             "start-up included")  # fmt: skip
    parser.add_argument("--no-warm", action="store_true",
                        help="with --cold: skip the untimed 300-client round that fills "
                             "numba's cache")  # fmt: skip
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}, "
          f"cost-only FedAvg, {args.rounds} round(s)"
          f"{', cold processes' if args.cold else ''}")  # fmt: skip
    if args.cold and not args.no_warm and "event" in args.engine:
        warm(args.mobility)
    print(f"{'engine':>8} {'cells':>5} {'part':>5} {'mobility':>15} {'clients':>8} {'s/round':>8} "
          f"{'rows/s':>8} {'sim s':>7} {'peak GB':>8} {'start s':>8}")  # fmt: skip
    for engine, cells, part, model in itertools.product(
        args.engine, args.cells, args.participation, args.mobility
    ):
        per_round = []
        for n in args.clients:
            f = run_child(CHILD, str(n), str(args.rounds), str(part), model, engine,
                          json.dumps(hexagon(cells)), "1" if args.cold else "0")  # fmt: skip
            per_round.append(f["run_s"] / args.rounds)
            start = "-" if f["start_s"] is None else f"{f['start_s']:.2f}"
            print(f"{engine:>8} {cells:>5} {part:>5g} {model:>15} {n:>8} {per_round[-1]:>8.2f} "
                  f"{f['rows'] / f['run_s']:>8.0f} {f['sim_s']:>7.2f} {f['peak_gb']:>8.2f} "
                  f"{start:>8}", flush=True)  # fmt: skip
        if len(args.clients) > 1:
            print(f"{'':>8} growth exponent over {args.clients}: "
                  f"{exponent(args.clients, per_round):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
