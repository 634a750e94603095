"""What each column of ``compare.csv`` means: its unit, and whether it is per client, per
round or summed over the run. One source for ``compare.md``'s glossary, the docs and a
test that every column written has a description.

Units: seconds are simulated seconds; bytes are bytes (the Markdown tables show MiB,
2^20 bytes, everywhere); energy is joules; FLOPs count a multiply-add as 2.
"""

from __future__ import annotations

MIB = 2**20
"""The byte unit of every Markdown table (``compare.md``, ``mecsim report``)."""

PER_TARGET = {
    "pm_time_T": "simulated s until the personalized accuracy first reaches T (at `t_personal`)",
    "gm_time_T": "simulated s until the generic accuracy first reaches T",
    "pm_speedup_T": "the baseline run's `pm_time_T` over this run's",
    "gm_speedup_T": "the baseline run's `gm_time_T` over this run's",
}
"""Columns written once per accuracy target ``T`` (``pm_time_0.8``)."""

COLUMNS = {
    "run": "the run's label: algorithm / protocol, plus the settings that tell it apart",
    "algorithm": "the algorithm's registered name",
    "protocol": "the protocol (wait-free runs: with their personal budget)",
    "baseline": "the label of the run its speedups are over (empty: none)",
    "sim_time_s": "simulated s from the start to the end of the last round (its last "
    "transfer or computation, a backhaul transfer included; the new clients' join not)",
    "final_pm_acc": "the last evaluated personalized accuracy (mean over clients)",
    "final_gm_acc": "the last evaluated generic (global-model) accuracy",
    "idle_s_per_client": "mean over clients of the time in [0, end] not downloading, "
    "computing or uploading",
    "energy_j": "joules of the whole run, summed over clients, server and backhaul, the "
    "clients' idle energy included (= `summary.json`'s `energy_j.total`)",
    "idle_energy_j": "joules the clients drew waiting within their rounds, summed over "
    "clients (part of `energy_j`)",
    "backhaul_energy_j": "joules of the edge-cloud backhaul transfers, summed (part of "
    "`energy_j`; hierarchical runs)",
    "bytes_up": "bytes uploaded in the rounds, summed over clients and rounds",
    "bytes_down": "bytes received in the rounds, summed over clients and rounds",
    "bytes_backhaul": "bytes over the edge-cloud backhaul, summed over edges and rounds",
    "handovers_per_round": "handovers (a client changing cell) per round, all clients",
    "best_pm_acc": "the highest evaluated personalized accuracy of any round",
    "pm_acc_std": "the standard deviation over clients of the final personalized accuracy",
    "best_gm_acc": "the highest evaluated generic accuracy of any round",
    "bytes_up_per_round": "bytes uploaded per round, summed over the round's clients",
    "bytes_down_per_round": "bytes received per round, summed over the round's clients",
    "bytes_up_total": "bytes uploaded in the whole run, summed over clients",
    "bytes_down_total": "bytes received in the whole run (the public split's download "
    "included), summed over clients",
    "public_bytes_down": "bytes of the public split's one-time download, summed over clients",
    "public_download_s": "simulated s the public split's download took",
    "upload_s_per_round": "s a client of a round spends uploading (mean over its clients)",
    "download_s_per_round": "s a client of a round spends downloading (mean over its clients)",
    "client_state_peak_bytes": "the largest state one client kept (the maximum over clients)",
    "server_state_peak_bytes": "the largest state the server kept",
    "clients_per_round": "clients a round took (mean over rounds)",
    "participation_jain": "Jain's index of the rounds each client took part in (1: equally)",
    "mean_tx_power_w": "the clients' transmit energy over their air time",
    "energy_j_per_client": "`energy_j` over the clients that train",
    "band_utilization": "band-time the uploads used over the cell band on offer while any "
    "upload was on the air",
    "upload_phase_s": "s from a round's first upload start to its last upload end (mean over "
    "rounds)",
    "updates_per_round": "uploads that reached the server in a round (mean over rounds)",
    "mean_pm_acc": "personalized accuracy averaged over the evaluated rounds",
    "new_clients": "clients held out of training that join after the last round",
    "new_client_acc": "the new clients' mean accuracy after adapting (per client, averaged "
    "as `evaluation.personal_mean` weighs it)",
    "new_client_acc_std": "the standard deviation over the new clients of their accuracy",
    "new_client_accs": "each new client's accuracy, in client order, separated by `;`",
    "new_client_bytes_down": "bytes the new clients received to join, summed over them",
    "new_client_bytes_down_per_client": "`new_client_bytes_down` over `new_clients`",
    "new_client_flops": "FLOPs of the new clients' adaptation, summed over them",
    "new_client_flops_per_client": "`new_client_flops` over `new_clients`",
    "new_client_join_s": "simulated s from the last round's last event until the last new "
    "client had joined (one span for all of them, not a sum)",
}
"""Every other column, by name."""


def describe_column(name: str) -> str | None:
    """The description of a ``compare.csv`` column (None: not one; a swept setting's
    column is the setting)."""
    if name in COLUMNS:
        return COLUMNS[name]
    for pattern, text in PER_TARGET.items():
        target = name.removeprefix(pattern.removesuffix("T"))
        if target != name and target.replace(".", "", 1).isdigit():
            return text.replace("T", target)  # the only capital T of each text
    return None


def glossary(names: list[str]) -> list[str]:
    """Markdown lines: a bullet per column of ``names`` that has a description."""
    lines = ["", "## Columns", ""]
    lines += [f"- `{n}`: {text}" for n in names if (text := describe_column(n)) is not None]
    return lines
