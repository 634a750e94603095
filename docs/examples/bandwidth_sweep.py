"""Worked example 5 (docs/examples.md): an uplink-bandwidth sweep with two seeds, run and
plotted from the Python API. Run from the repository's root:

    python docs/examples/bandwidth_sweep.py runs/ex5
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import mecsim

out = sys.argv[1] if len(sys.argv) > 1 else "runs/ex5"
table = mecsim.sweep(
    "scenarios/quickstart.toml",
    {"clients.bandwidth_mhz": [0.5, 2, 8, 32]},
    out=out,
    overrides=["protocol.rounds=15"],
    seeds=[0, 1],
    targets=[0.8, 0.9],
)
means = table.groupby("clients.bandwidth_mhz")[["pm_time_0.9", "sim_time_s", "energy_j"]]
summary = means.agg(["mean", "std"])
print(summary.round(2).to_string())

fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
for seed, runs in table.groupby("seed"):
    ax.plot(runs["clients.bandwidth_mhz"], runs["pm_time_0.9"], marker="o", label=f"seed {seed}")
ax.set_xscale("log")
ax.set_xlabel("uplink band per client (MHz)")
ax.set_ylabel("simulated s to 90 % accuracy")
ax.legend()
fig.savefig(f"{out}/time_to_90.png", dpi=120)
fig.savefig(f"{out}/time_to_90.svg")
print(f"wrote {out}/time_to_90.png")
