"""New clients (``evaluation.new_clients``): held out of training, they join after the last round.

SCD's appendix B ("new joining clients"), FedBABU and pFedHN measure how a
trained federation serves clients it never saw. The last K clients never train
or upload; once the protocol's last round has ended, each of them

1. receives the final downlink (the global model(s), timed as any download,
   after the algorithm's per-selection server work);
2. adapts (``evaluation.new_client_adaptation``):

   * ``"algorithm"`` (default): an algorithm with a personalization step of its
     own (a client training task that does not upload: Ditto's personal model,
     pFedMe's theta, Per-FedAvg's one step) runs its round's tasks once and
     uploads nothing; any other (FedAvg's family) fine-tunes the model a client
     would use, its personal model or else the generic one;
   * ``"finetune"``: every algorithm fine-tunes the received generic model (a
     model-decoupling method without one, its client model), as SCD's appendix
     B does for every method (5 and 10 epochs);

   fine-tuning is ``evaluation.new_client_epochs`` epochs of cross-entropy with
   the algorithm's SGD settings (task ``newcomer-finetune``; 0: as received);
3. is evaluated on its local test split.

Every step is an event of round ``protocol.rounds`` (one past the last trained
round) in the events table. The accuracies are reported apart from the trained
clients' (``summary.json``: ``new_client_acc``, its standard deviation and the
per-client values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mecsim.algorithms.base import Algorithm, ClientState, ServerState, Task
from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.common.rng import torch_generator
from mecsim.executors.base import TrainingContext, split_tensors
from mecsim.learning.state import ModelState
from mecsim.learning.training import Schedule, SplitData, train

if TYPE_CHECKING:
    from mecsim.engine.simulation import Process, Simulation

FINETUNE = Task("newcomer-finetune", model="newcomer")


def has_personalization_step(algorithm: Algorithm, round_: int) -> bool:
    """Whether the algorithm's clients train something they do not upload in ``round_``."""
    return any(t.mode == "train" and not t.uploads for t in algorithm.round_tasks(round_))


def starting_model(
    algorithm: Algorithm, state: ClientState, server_state: ServerState, generic_first: bool
) -> ModelState | None:
    """The model a new client fine-tunes: its personal model, else the generic one (or
    the generic one first)."""
    personal = algorithm.personal_model(state, server_state)
    generic = algorithm.generic_model(server_state)
    first, second = (generic, personal) if generic_first else (personal, generic)
    return first if first is not None else second


def finetune(
    ctx: TrainingContext, client: int, start: ModelState, indices: dict, epochs: int, round_: int
) -> tuple[ModelState, int]:
    """``epochs`` of cross-entropy SGD (the algorithm's batch size, lr, momentum, weight
    decay) on the client's training split; returns the model and its metered FLOPs."""
    settings = ctx.algorithm.settings
    schedule = Schedule(
        epochs, None, settings.batch_size, settings.lr, settings.momentum, settings.weight_decay
    )
    x, y = split_tensors(ctx.data, "train")
    own = indices["train"]
    steps = schedule.num_steps(len(own))
    arch = ctx.models.of(client).name
    loss = cross_entropy_loss("train")
    shape = (min(schedule.batch_size, len(own)), *x.shape[1:])
    per_step = ctx.meter.step_flops(
        (arch, FINETUNE), ctx.functions[arch], loss, start, {}, {"train": shape}, None
    )
    if steps == 0 or next(iter(start.params.values())).is_meta:  # cost-only: no values
        return start, steps * per_step
    generator = torch_generator(ctx.seed, "batches", client, round_, FINETUNE.name)
    split = SplitData(x, y, own, schedule.batch_size, generator)
    result = train(ctx.functions[arch], start, {"train": split}, schedule, loss)
    return result.state, steps * per_step


def welcome(sim: Simulation, adaptation: str, epochs: int) -> Process:
    """After the last round: every new client downloads, adapts and is kept for evaluation
    (``sim.newcomer_models``)."""
    newcomers = list(range(len(sim.trainers), len(sim.clients)))
    if not newcomers:
        return
    round_ = sim.protocol.rounds
    yield from sim.prepare_downlinks(round_, newcomers)
    payloads = sim.payloads(newcomers, round_)
    deliveries = sim.downlink_transfers(round_, payloads)
    own_step = adaptation == "algorithm" and has_personalization_step(sim.algorithm, round_)
    results = sim.execute(round_, payloads) if own_step else {}
    processes = [
        sim.env.process(
            _join(sim, round_, c, deliveries.get(c), results.get(c), adaptation, epochs)
        )
        for c in newcomers
    ]
    yield sim.env.all_of(processes)


def _join(
    sim: Simulation, round_: int, client: int, delivery, result, adaptation: str, epochs: int
) -> Process:
    """One new client: download, then its adaptation, timed on its device."""
    if not (yield from sim.download(round_, delivery)):
        return  # it never received the model: no model to score (its accuracy is NaN)
    algorithm = sim.algorithm
    if result is not None:  # the algorithm's own step (its upload is never sent)
        yield from sim.compute_tasks(round_, result, algorithm.round_tasks(round_), can_fail=False)
        sim.commit(client, result.state, sim.env.now)
        sim.newcomer_models[client] = starting_model(
            algorithm, result.state, sim.server_state, generic_first=False
        )
        return
    state = sim.client_states[client]
    generic_first = adaptation == "finetune"
    start = starting_model(algorithm, state, sim.server_state, generic_first)
    if start is None or epochs == 0 or sim.training is None:
        sim.newcomer_models[client] = start
        return
    model, flops = finetune(sim.training, client, start, sim.indices[client], epochs, round_)
    yield from sim.compute(round_, client, FINETUNE, flops)
    sim.newcomer_models[client] = model


class FixedModels:
    """Evaluates given models as each client's personalized model (no generic model)."""

    def generic_model(self, server_state: ServerState) -> None:
        return None

    def personal_model(self, state: ClientState, server_state: ServerState) -> ModelState | None:
        return state.get("model")


def newcomer_states(models: dict[int, ModelState | None], clients: Sequence[int]) -> list[dict]:
    """Client states :class:`FixedModels` reads, in ``clients`` order."""
    return [{"model": models.get(c)} for c in clients]
