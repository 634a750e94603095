"""Hierarchical federated learning: clients, edge servers, a cloud (HierFAVG).

Liu, Zhang, Song and Letaief, "Client-Edge-Cloud Hierarchical Federated
Learning", ICC 2020, Algorithm 1 (HierFAVG): every client runs kappa_1 local
updates (the algorithm's own epochs or steps), then its edge server, the one
in the cell it is associated with, averages the models of its clients; every
kappa_2 edge aggregations (``protocol.edge_rounds``) the edge servers send
their models over the backhaul to the cloud, which averages them weighted by
the data under each edge, ``sum_l |D^l| w^l / |D|``, and sends the result back
down to every edge.

A round of this protocol is one edge round: downlink from each edge server
(each cell's radio broadcasts its own edge model), the clients' tasks, the
uploads, and one aggregation per edge, on the cell's edge device and at the
same time across cells (``aggregate`` rows, with the cell). A round that ends
a block of kappa_2 (and the last round) adds the cloud step: ``backhaul``
rows up from each cell (``latency + 8 bytes / rate``, ``energy_nj_per_bit``
per bit, ``[network.backhaul]``), the cloud's ``aggregate:cloud`` on the server
device, and ``backhaul`` rows down. The rounds table's ``level`` says which
rounds reached the cloud; the generic model evaluated is the cloud's latest.

With one cell the edge server is the cloud: no backhaul and no second
average, and HierFAVG is FedAvg (the same tables, ``level`` aside).

``relay = true`` (with ``edge_rounds = 1``) is FedAvg through the cloud: each
edge server forwards its clients' updates, back to back in one ``backhaul``
row, and the cloud averages the clients' updates (FedAvg's weights) and sends
the model down to every edge. The backhaul then carries one update per client
instead of one model per cell.

With moving clients an edge round's members are the clients each cell serves
when the first cell starts the round; a member that hands over during the round still
reports to that edge (its upload reaches the new cell's base station, which
forwards it; the forwarding is not costed), and takes part under its new cell
from the next edge round on. Cells keep their own pace, so a client may hand
over to a cell that starts its next round while the client still works on the
old cell's: a client finishes the round it started at the cell it started
with, and is left out of any round split meanwhile (it joins the first round
split after it is free), so it never runs two jobs at once. The paper and
``LuminLiu/HierFL`` have fixed client-edge assignments and no clock, so neither
meets this case. The cloud weighs each edge by the samples of the
clients it serves at the cloud step.

Paper and authors' code (``LuminLiu/HierFL``, ``hierfavg.py``, ``edge.py``,
``cloud.py``) agree on the weights: an edge weighs its participating clients by
their samples, the cloud weighs each edge by the samples of all its clients
(``all_trainsample_num``), as here. They differ from mecsim in who takes part:
the code draws ``frac`` of each edge's clients, with probability proportional
to their data; mecsim draws the round's selection from all clients
(``protocol.participation``, ``selection``), so an edge may get more or fewer.
Their simulation has no clock: edges run one after another.

Only algorithms whose aggregation is a weighted mean of the payloads they
send down and up (FedAvg's ``aggregate``, ``downlink`` and ``upload``, kept or
declared with ``hierarchical = True``) can be aggregated twice; others are
refused before the run. Edge states live in the checkpoint's ledger, so a run
resumes like any other.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Literal

import simpy
from pydantic import Field, model_validator

from mecsim.algorithms.base import SERVER, Algorithm, ServerState, Upload
from mecsim.engine.simulation import Process, Simulation
from mecsim.learning.devices import energy_j
from mecsim.learning.state import payload_nbytes
from mecsim.protocols.registry import register_protocol
from mecsim.protocols.settings import ProtocolSettings
from mecsim.protocols.synchronous import _aggregate, _prepare, caw_clients


class HierarchicalSettings(ProtocolSettings):
    """hierarchical: edge rounds, and how many of them per cloud aggregation."""

    kind: Literal["hierarchical"] = "hierarchical"
    edge_rounds: int = Field(
        default=2, ge=1, le=10_000, description="kappa_2: edge aggregations per cloud aggregation"
    )
    relay: bool = Field(
        default=False,
        description="FedAvg through the cloud: edge servers average nothing and forward every "
        "client's update over the backhaul; the cloud averages them each round",
    )

    @model_validator(mode="after")
    def _relay_every_round(self) -> HierarchicalSettings:
        if self.relay and self.edge_rounds != 1:
            raise ValueError(
                "relay forwards every update to the cloud each round: set edge_rounds = 1"
            )
        return self


def aggregates_twice(algorithm: type[Algorithm]) -> bool:
    """Whether a weighted mean of weighted means is the algorithm's aggregation: it declares
    ``hierarchical``, or keeps FedAvg's ``aggregate``, ``downlink`` and ``upload``."""
    declared = getattr(algorithm, "hierarchical", None)
    if declared is not None:
        return bool(declared)
    from mecsim.algorithms.fedavg import FedAvg

    hooks = ("aggregate", "downlink", "upload", "server_tasks", "prepare_downlinks")
    return issubclass(algorithm, FedAvg) and all(
        inspect.unwrap(getattr(algorithm, h)) is inspect.unwrap(getattr(FedAvg, h)) for h in hooks
    )  # (unwrapped: instrumentation such as mecsim check's recorders is no override)


@register_protocol(
    "hierarchical",
    HierarchicalSettings,
    "client-edge-cloud rounds (HierFAVG): edge averages every round, cloud every edge_rounds",
)
def hierarchical(sim: Simulation) -> Process:
    """Server process of HierFAVG (see the module docstring): blocks of kappa_2 edge rounds,
    each cell at its own pace within a block, the cloud step at the block's end."""
    env, cells = sim.env, sim.network.cells
    kappa2, rounds = sim.protocol.edge_rounds, sim.protocol.rounds
    edges = None if len(cells) == 1 else sim.ledger.add(dict.fromkeys(range(len(cells))))
    running: dict[int, dict[int, simpy.Process]] = {c: {} for c in range(len(cells))}
    for first in range(0, rounds, kappa2):
        block = range(first, min(first + kappa2, rounds))
        rows = {r: _Round(env, len(cells)) for r in block}
        rows[first].start = env.now
        yield from sim.wait_for_online()
        if edges is not None:  # a block starts from the cloud model
            edges.update(dict.fromkeys(edges, sim.server_state))
        cell_rounds = [
            env.process(_edge_rounds(sim, edges, c, rows, running)) for c in range(len(cells))
        ]
        for r in block:
            yield rows[r].done
            cloud = r == block[-1]
            if cloud and edges is not None:
                yield env.all_of(cell_rounds)
                if sim.protocol.relay:
                    yield from _cloud_of_clients(sim, r, edges, rows[r].relayed)
                else:
                    yield from _cloud(sim, r, edges)
            counted = None if edges is None else rows[r].updates  # one cell: aggregate counts
            sim.end_round(r, rows[r].start, rows[r].selected, counted, failed=rows[r].failed,
                          level="cloud" if cloud else "edge")  # fmt: skip


@dataclass
class _Round:
    """One edge round across cells: its selection (drawn by the first cell to start it),
    failures, and an event that succeeds when every cell has aggregated."""

    env: simpy.Environment
    cells: int
    start: float | None = None
    selected: list[int] | None = None
    failed: int = 0
    updates: int = 0
    relayed: list[Upload] = field(default_factory=list)
    """With ``relay``: the clients' updates forwarded to the cloud."""
    finished: int = 0
    done: simpy.Event = field(init=False)

    def __post_init__(self) -> None:
        self.done = self.env.event()

    def members(
        self, sim: Simulation, round_: int, cell: int, running: dict[int, dict[int, simpy.Process]]
    ) -> list[int]:
        """The round's clients in ``cell``: the selection split by the cell serving each
        client when the first cell starts the round (once, so a client that hands over
        meanwhile takes part once), less the clients still at work in another cell's
        earlier round (``running``: each cell's client jobs)."""
        if self.selected is None:
            self.start = self.env.now if self.start is None else self.start
            self.selected = [
                c
                for c in sim.select(round_)
                if not _busy_elsewhere(c, sim.network.cell_of(c), running)
            ]
            self._by_cell: dict[int, list[int]] = {}
            for c in self.selected:
                self._by_cell.setdefault(sim.network.cell_of(c), []).append(c)
        return self._by_cell.get(cell, [])

    def finish(self) -> None:
        self.finished += 1
        if self.finished == self.cells:
            self.done.succeed()


def _busy_elsewhere(client: int, cell: int, running: dict[int, dict[int, simpy.Process]]) -> bool:
    """Whether ``client`` still works on a round of a cell other than ``cell``."""
    return any(
        (job := jobs.get(client)) is not None and job.is_alive
        for other, jobs in running.items()
        if other != cell
    )


def _edge_rounds(
    sim: Simulation,
    edges: dict | None,
    cell: int,
    rows: dict[int, _Round],
    running: dict[int, dict[int, simpy.Process]],
):
    """Cell ``cell``'s edge rounds of a block: downlink of its edge model, its clients'
    tasks and uploads, its edge aggregation; then the next, without waiting for others."""
    for round_, row in rows.items():
        members = row.members(sim, round_, cell, running)
        if members:
            payloads = yield from _at_edge(sim, edges, cell, _prepare(sim, round_, members))
            arrived: list[Upload] = []
            running[cell] = {}
            row.failed += yield from caw_clients(sim, round_, payloads, arrived, running[cell])
            if edges is None:  # one cell: the edge is the cloud
                yield from _aggregate(sim, round_, arrived)
            elif arrived and sim.protocol.relay:
                yield from _backhaul(sim, round_, cell, [u.payload for u in arrived], "up")
                row.relayed += arrived
                row.updates += len(arrived)
            elif arrived:
                arrived.sort(key=lambda u: u.client)  # order-independent sums
                at = (sim.devices.get(sim.network.cells[cell].device), cell)
                edges[cell] = yield from sim.aggregate_at(round_, edges[cell], arrived, at)
                row.updates += len(arrived)
        row.finish()


hierarchical.supports = aggregates_twice  # type: ignore[attr-defined]
hierarchical.requirement = (  # type: ignore[attr-defined]
    "its rounds average twice (edge, then cloud), which needs an algorithm whose aggregation "
    "is a weighted mean of the models it sends (fedavg, fedprox, ditto, ...)"
)


def _at_edge(sim: Simulation, edges: dict | None, cell: int, work: Process) -> Process:
    """Run ``work`` with cell ``cell``'s edge state as the server state (no swap with one
    cell); keep what it leaves there as the edge's state."""
    if edges is None:
        return (yield from work)
    cloud, sim.server_state = sim.server_state, edges[cell]
    try:
        value = yield from work
        edges[cell] = sim.server_state
    finally:
        sim.server_state = cloud
    return value


def _cloud(sim: Simulation, round_: int, edges: dict[int, ServerState]) -> Process:
    """Edges up the backhaul, the cloud's weighted mean, the result down to every edge."""
    env, algorithm = sim.env, sim.algorithm
    context = sim.context(round_, SERVER)
    samples = dict.fromkeys(edges, 0)
    for client, n in enumerate(sim.num_samples):
        samples[sim.network.cell_of(client)] += n
    models = {cell: sim.ledger.add(algorithm.downlink(edges[cell], context)) for cell in edges}
    yield env.all_of([env.process(_backhaul(sim, round_, cell, models[cell], "up"))
                      for cell in edges])  # fmt: skip
    uploads = [Upload(cell, models[cell], samples[cell]) for cell in edges if samples[cell]]
    yield from sim.aggregate(round_, uploads, phase="aggregate:cloud", counted=False)
    model = sim.ledger.add(algorithm.downlink(sim.server_state, context))
    yield env.all_of([env.process(_backhaul(sim, round_, cell, model, "down"))
                      for cell in edges])  # fmt: skip
    edges.update(dict.fromkeys(edges, sim.server_state))


def _cloud_of_clients(
    sim: Simulation, round_: int, edges: dict[int, ServerState], updates: list[Upload]
) -> Process:
    """FedAvg at the cloud over the relayed client updates; the model down to every edge."""
    updates = sorted(updates, key=lambda u: u.client)  # order-independent sums
    yield from sim.aggregate(round_, updates, phase="aggregate:cloud", counted=False)
    model = sim.ledger.add(sim.algorithm.downlink(sim.server_state, sim.context(round_, SERVER)))
    yield sim.env.all_of([sim.env.process(_backhaul(sim, round_, cell, model, "down"))
                          for cell in edges])  # fmt: skip
    edges.update(dict.fromkeys(edges, sim.server_state))


def _backhaul(sim: Simulation, round_: int, cell: int, payload, direction: str) -> Process:
    """A model (or, relayed, a list of updates sent back to back) over cell ``cell``'s
    backhaul: ``latency + 8 bytes / rate``."""
    link = sim.network.config.backhaul
    nbytes = (
        sum(map(payload_nbytes, payload)) if isinstance(payload, list) else payload_nbytes(payload)
    )
    seconds = link.latency_ms / 1e3 + 8 * nbytes / (link.rate_mbps * 1e6)
    start = sim.env.now
    yield sim.env.timeout(seconds)
    sim.recorder.event(
        round_, SERVER, "backhaul", start, sim.env.now, duration_s=seconds, direction=direction,
        role="backhaul", nbytes=nbytes, energy_j=energy_j(8 * nbytes, link.energy_nj_per_bit * 1e-9),
        cell=cell,
    )  # fmt: skip
