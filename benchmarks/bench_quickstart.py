"""End-to-end quickstart wall time: serial vs batched executor, side by side.

python benchmarks/bench_quickstart.py [--device cuda]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

import mecsim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    mecsim.run(
        "scenarios/quickstart.toml", ["protocol.rounds=1"], write=False, progress=False
    )  # warm-up
    results, times = {}, {}
    for executor in ("serial", "batched"):
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            results[executor] = mecsim.run(
                "scenarios/quickstart.toml",
                write=False,
                progress=False,
                executor=executor,
                device=args.device,
            )
            best = min(best, time.perf_counter() - start)
        times[executor] = best
    same = results["serial"].events.equals(results["batched"].events)
    acc = {k: r.summary["final_generic_acc"] for k, r in results.items()}
    print(
        f"quickstart on {args.device}: serial {times['serial']:.2f} s, batched {times['batched']:.2f} s,"
        f" speedup {times['serial'] / times['batched']:.2f}x"
    )
    print(
        f"final generic accuracy: serial {acc['serial']:.4f}, batched {acc['batched']:.4f};"
        f" identical events tables: {same}"
    )
    pd.set_option("display.width", 120)


if __name__ == "__main__":
    main()
