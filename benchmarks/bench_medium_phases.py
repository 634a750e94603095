"""Where a multi-cell round's time goes: wall seconds and calls per phase of the event medium.

One run of ``bench_medium_scale.py``'s scenario in this process, with perf_counter
wrappers around the medium's phases (each figure includes what the phase calls, so
they overlap: a tick can run inside a start, which advances the medium to now first):

- ``start``: ``Medium.start``, an upload or downlink put on the air;
- ``tick``: ``EventMedium._new_tick``, moving clients' positions, gains and every open
  reception brought up to date;
- ``step``: ``EventMedium._step``, the receptions that end, fail or start a fading
  block at a change point;
- ``next change``: ``Medium.next_change``, the search for the next change point;
- ``handover schedule``: ``HandoverSchedule._evaluate``, one tick of the A3 test.

The wrappers cost ~1 us a call, so the run is slower than ``bench_medium_scale.py``'s.

    python benchmarks/bench_medium_phases.py --clients 10000 --mobility random_waypoint
    python benchmarks/bench_medium_phases.py --clients 100000 --cells 19 --participation 0.1
"""

from __future__ import annotations

import argparse
import collections
import functools
import time

from bench_medium_scale import hexagon

import mecsim
from mecsim.channels import event_medium, medium
from mecsim.net import handover

PHASES = {
    "start": (medium.Medium, "start"),
    "tick": (event_medium.EventMedium, "_new_tick"),
    "step": (event_medium.EventMedium, "_step"),
    "next change": (medium.Medium, "next_change"),
    "handover schedule": (handover.HandoverSchedule, "_evaluate"),
}


def timed(seconds: collections.Counter, calls: collections.Counter, name: str, f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - started
            calls[name] += 1

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=10000)
    parser.add_argument("--cells", type=int, default=7)
    parser.add_argument("--participation", type=float, default=1.0)
    parser.add_argument("--mobility", default="random_waypoint")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    cells = hexagon(args.cells)
    xs, ys = [x for x, _ in cells], [y for _, y in cells]
    clients = {"count": args.clients, "num_samples": 100,
               "x_m": {"dist": "uniform", "low": min(xs) - 400, "high": max(xs) + 400},
               "y_m": {"dist": "uniform", "low": min(ys) - 400, "high": max(ys) + 400}}  # fmt: skip
    if args.mobility != "static":
        clients["mobility"] = {"model": args.mobility, "speed_mps": [10, 30]}
    scenario = {
        "name": "bench-medium-phases", "seed": 0,
        "data": {"dataset": "digits"}, "model": {"name": "cnn-small"},
        "algorithm": {"name": "fedavg", "steps": 5},
        "protocol": {"kind": "compute_and_wait", "rounds": args.rounds,
                     "participation": args.participation},
        "network": {"cells": [{"x_m": x, "y_m": y} for x, y in cells], "medium": "event"},
        "clients": clients, "execution": {"cost_only": True}, "output": {"progress": False},
    }  # fmt: skip
    seconds: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for name, (owner, method) in PHASES.items():
        setattr(owner, method, timed(seconds, calls, name, getattr(owner, method)))
    started = time.perf_counter()
    mecsim.run(scenario, write=False)
    run_s = time.perf_counter() - started
    print(f"{args.clients} clients, {args.cells} cells, participation {args.participation:g}, "
          f"{args.mobility}, {args.rounds} round(s): run {run_s:.2f} s")  # fmt: skip
    print(f"{'phase':>18} {'s':>7} {'share':>6} {'calls':>8} {'us/call':>8}")
    for name in PHASES:
        if calls[name]:
            s, n = seconds[name], calls[name]
            print(f"{name:>18} {s:7.2f} {s / run_s:6.1%} {n:8d} {s / n * 1e6:8.1f}")


if __name__ == "__main__":
    main()
