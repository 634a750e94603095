"""Engine overhead: cost-only rounds with many clients, and the non-training share of real rounds.

1. Wall time of one cost-only compute-and-wait round (FedAvg, quickstart CNN,
   full participation) with 1,000 and 10,000 clients: selection, downlink
   and uplink channel draws, SimPy processes, recording, aggregation on
   meta tensors.
2. The share of a real round's wall time spent outside training (engine,
   recording, evaluation excluded/included), from the quickstart scenario.

    python benchmarks/bench_engine.py
"""

from __future__ import annotations

import argparse
import time

import mecsim

QUICKSTART = "scenarios/quickstart.toml"


def cost_only_round(clients: int) -> float:
    overrides = {
        "execution.cost_only": True,
        "clients.count": clients,
        "clients.num_samples": {"dist": "uniform", "low": 20, "high": 200},
        "protocol.rounds": 2,
    }
    result = mecsim.run(QUICKSTART, overrides, write=False, progress=False)
    return float(result.rounds["wall_s"].iloc[-1])  # the second round: no first-call warm-up


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", nargs="+", type=int, default=[1_000, 10_000])
    parser.add_argument("--executor", default="batched")
    args = parser.parse_args()

    print("cost-only round wall time")
    for n in args.clients:
        print(f"  {n:>6} clients: {cost_only_round(n):.3f} s per round", flush=True)

    result = mecsim.run(
        QUICKSTART, {"execution.executor": args.executor}, write=False, progress=False
    )
    rounds = result.rounds.iloc[1:]  # skip the first round's warm-up
    wall, train = rounds["wall_s"].sum(), rounds["wall_train_s"].sum()
    no_eval = mecsim.run(
        QUICKSTART,
        {"execution.executor": args.executor, "protocol.eval_every": 1000},
        write=False,
        progress=False,
    ).rounds.iloc[1:-1]  # the last round always evaluates
    wall_ne, train_ne = no_eval["wall_s"].sum(), no_eval["wall_train_s"].sum()
    print(
        f"quickstart ({args.executor}), per round: wall {wall / len(rounds) * 1e3:.1f} ms,"
        f" training {train / len(rounds) * 1e3:.1f} ms"
    )
    print(
        f"  outside training, evaluation every round: {100 * (wall - train) / wall:.1f}% of wall time"
    )
    print(
        f"  outside training, no evaluation (engine + recording): "
        f"{100 * (wall_ne - train_ne) / wall_ne:.1f}% of wall time"
    )


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"(benchmark took {time.perf_counter() - started:.1f} s)")
