"""Protocols decide when client work and communication happen.

``compute_and_wait`` (synchronous FedAvg-style rounds): the server selects
clients and sends the downlink; each selected client downloads, runs all of
its tasks, uploads, then idles until the next round; the server aggregates
when the last selected upload has arrived, and the round ends.
"""

from __future__ import annotations

from collections.abc import Callable

from mecsim.algorithms.base import Upload
from mecsim.executors import JobResult
from mecsim.network import Transfer
from mecsim.registry import Registry
from mecsim.simulation import Process, Simulation

PROTOCOLS: Registry[Callable[[Simulation], Process]] = Registry("protocol", "protocol.kind")


def _client_round(
    sim: Simulation, round_: int, transfer: Transfer, result: JobResult, arrived: list[Upload]
) -> Process:
    """Download, every task in order, then upload (compute-and-wait client)."""
    client = result.client
    yield from sim.download(round_, transfer)
    for task in sim.algorithm.tasks:
        yield from sim.compute(round_, client, task, result.task_flops[task.name])
    if result.upload is not None:
        yield from sim.upload(round_, client, result.upload)
        arrived.append(Upload(client, result.upload, sim.num_samples[client]))


@PROTOCOLS.register(
    "compute_and_wait", "synchronous rounds: download, compute all tasks, upload, wait"
)
def compute_and_wait(sim: Simulation) -> Process:
    """Server process of synchronous compute-and-wait rounds."""
    env = sim.env
    for round_ in range(sim.protocol.rounds):
        round_start = env.now
        selected = sim.select(round_)
        payloads = sim.payloads(selected)
        transfers = sim.downlink_transfers(round_, payloads)
        results = sim.execute(round_, payloads)
        arrived: list[Upload] = []
        clients = [
            env.process(_client_round(sim, round_, transfers[c], results[c], arrived))
            for c in selected
        ]
        yield env.all_of(clients)
        for c in selected:
            sim.client_states[c] = results[c].state
        if arrived:
            arrived.sort(key=lambda u: u.client)
            yield from sim.aggregate(round_, arrived)
        sim.end_round(round_, round_start, selected)
