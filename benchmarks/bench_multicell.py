"""Several cells in cost-only mode: how the interference engine scales with the clients.

Each measurement is a whole process: ``mecsim.run`` of a cost-only FedAvg
scenario (``steps = 5``, 100 samples per client, 2 compute-and-wait rounds)
with N clients spread over 7 hexagonal cells 600 m apart (reuse 1, so every
transmission interferes with every other cell's), beside the same N clients
in one cell (no medium: bulk rounds). It prints both wall times and their
ratio, and the growth from one N to the next.

    python benchmarks/bench_multicell.py                # N = 25, 50, 100
    python benchmarks/bench_multicell.py --clients 100 200 400 800

What it shows: the medium keeps its open receptions in numpy arrays and steps
to its next change point only (``MediumRadio``), so 800 clients in 7 cells
take 3.5 s against 2.0 s in one cell (bulk rounds), growing about 1.2x per
doubling (it was 3.7x when every start re-forecast the whole medium: 200
clients took 22.6 s). ``bench_mobility.py`` measures 10,000 moving clients.
"""

from __future__ import annotations

import argparse

from _child import run_child

CELLS = [(0, 0), (600, 0), (-600, 0), (300, 520), (-300, 520), (300, -520), (-300, -520)]

CHILD = """
import json, sys, time
import mecsim
clients, cells = int(sys.argv[1]), json.loads(sys.argv[2])
scenario = {
    "name": "bench-multicell", "seed": 0,
    "data": {"dataset": "digits"}, "model": {"name": "cnn-small"},
    "algorithm": {"name": "fedavg", "steps": 5},
    "protocol": {"kind": "compute_and_wait", "rounds": 2},
    "network": {"cells": [{"x_m": x, "y_m": y} for x, y in cells]},
    "clients": {"count": clients, "num_samples": 100,
                "x_m": {"dist": "uniform", "low": -800, "high": 800},
                "y_m": {"dist": "uniform", "low": -700, "high": 700}},
    "execution": {"cost_only": True},
    "output": {"progress": False},
}
started = time.perf_counter()
result = mecsim.run(scenario, write=False)
print(json.dumps({"run_s": time.perf_counter() - started, "rows": len(result.events)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[25, 50, 100])
    args = parser.parse_args()
    import json

    print(f"{'clients':>8} {'7 cells s':>10} {'1 cell s':>9} {'ratio':>7} {'growth':>7}")
    previous = None
    for n in args.clients:
        seven = run_child(CHILD, str(n), json.dumps(CELLS))
        one = run_child(CHILD, str(n), json.dumps([[0, 0]]))
        growth = "" if previous is None else f"{seven['run_s'] / previous:6.1f}x"
        print(
            f"{n:>8} {seven['run_s']:>10.2f} {one['run_s']:>9.2f} "
            f"{seven['run_s'] / one['run_s']:>6.1f}x {growth:>7}"
        )
        previous = seven["run_s"]


if __name__ == "__main__":
    main()
