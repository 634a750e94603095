"""The algorithm interface (v2): tasks that carry their behaviour, pure losses, hooks with context.

An algorithm never sleeps, never reads the clock and never writes an SGD
loop. It declares:

* ``Settings`` - its scenario keys (a pydantic subclass of :class:`AlgorithmSettings`);
* state - :meth:`init_server_state` and :meth:`init_client_state` (dicts of
  :class:`~mecsim.learning.state.ModelState`, tensors, or anything picklable);
* what goes down - :meth:`downlink` (one broadcast payload, or one payload
  per client when ``broadcast`` is False; a client merges a partial payload
  into its own state with :func:`~mecsim.learning.state.merge`) - and what goes up -
  :meth:`upload`;
* client work - :meth:`round_tasks`, an ordered tuple of :class:`Task` (the
  class attribute ``tasks`` by default; multi-stage algorithms vary it by
  round). At most one task is marked ``uploads``: compute-and-wait runs
  every task then uploads; a wait-free protocol uploads right after it;
* per task - the model it starts from, its constants, its loss (a pure
  function, see :mod:`mecsim.learning.training`; its FLOPs are metered, element-wise
  work included, see :mod:`mecsim.learning.cost`), its schedule, and where the result
  goes: declared on the :class:`Task` itself (``start``, ``constants``,
  ``loss``, ``schedule``, ``finish``), or, for every task that declares none,
  the algorithm-wide hooks :meth:`begin_task`, :meth:`task_constants`,
  :meth:`loss`, :meth:`schedule` and :meth:`end_task`. The engine asks
  :func:`start_of`, :func:`constants_of`, :func:`loss_of`, :func:`schedule_of`
  and :func:`finish`, which take the task's own first;
* server work - :meth:`aggregate` (pure averaging, FLOPs from
  :meth:`aggregation_flops`), :meth:`prepare_downlinks` (work on a
  synchronous round's selection before its downloads, FLOPs from
  :meth:`preparation_flops`), :meth:`mix` for asynchronous protocols, and
  :meth:`server_tasks`, training or inference on the server that the
  executors run and meter like client work, timed on the server device;
* evaluation - :meth:`generic_model` on the global test set and
  :meth:`personal_model` on each client's local test split.

Every hook that depends on who or when receives a :class:`RoundContext`.
Class attributes declare what the algorithm supports: ``protocols``
(None: all), ``heterogeneous`` (mixed client architectures) and
``public_data`` (``"none"``, ``"unlabeled"`` or ``"labeled"``; a public
split is then downloaded once by every client, as a timed event).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from mecsim.common.rng import numpy_rng
from mecsim.common.section import Section
from mecsim.learning.models.catalog import Architecture, ModelCatalog
from mecsim.learning.state import ModelState, Payload, TensorDict, by_identity
from mecsim.learning.training import Loss, Schedule, TrainResult

ClientState = dict[str, Any]
ServerState = dict[str, Any]
SERVER = -1
"""The client id of the server in contexts and the events table."""


MAX_LR = 100.0
"""Largest learning rate a scenario may set: SGD past it diverges on any model here."""


class AlgorithmSettings(Section):
    """Settings every algorithm shares: its name and the local-training schedule.

    Algorithms subclass this to add their own keys (FedProx's ``mu``).
    """

    name: str = Field(default="fedavg", description="the algorithm (mecsim list algorithms)")
    epochs: int = Field(default=1, ge=1, description="local epochs per task")
    steps: int | None = Field(default=None, ge=1, description="local SGD steps; overrides epochs")
    batch_size: int = Field(default=16, ge=1, description="local SGD minibatch size")
    lr: float = Field(default=0.05, gt=0, le=MAX_LR, description="SGD learning rate")
    momentum: float = Field(default=0.0, ge=0, lt=1, description="local SGD momentum")
    weight_decay: float = Field(default=0.0, ge=0, description="local SGD weight decay (L2)")
    max_grad_norm: float = Field(
        default=0.0,
        ge=0,
        le=1e6,
        description="clip each local step's gradient to this global L2 norm (counted in "
        "FLOPs); 0: no clipping",
    )


@dataclass(frozen=True)
class Task:
    """A named unit of client (or server) work that carries its own behaviour.

    Args:
        name: shown in the events table's ``phase`` column (``compute:<name>``).
        model: key of the state entry this task trains or runs.
        mode: ``"train"`` (SGD steps of the loss), ``"infer"`` (a forward pass
            over the whole split; its outputs reach :meth:`Algorithm.end_task`,
            at forward-only FLOPs) or ``"compute"`` (no model is run:
            :meth:`Algorithm.compute` works on the client's state and returns the
            FLOPs it did, e.g. BLS's layer selection).
        split: the data it reads: ``"train"``, ``"val"`` or ``"public"``; epochs
            are passes over it.
        also: further batches drawn every step, as ``(split, batch_size)``
            (e.g. COMET's public mini-batch of size b').
        uploads: the upload payload is ready once this task ends.

    Its behaviour, each optional (None: the algorithm's hook of that name), a
    function of the algorithm first, so it reads the algorithm's settings:

        start(algorithm, task, state, payload, ctx) -> ModelState   the model it starts from
        constants(algorithm, task, state, payload, ctx) -> TensorDict   what its loss reads
        loss(algorithm, task) -> Loss                                the pure loss
        schedule(algorithm, task) -> Schedule                        epochs, rate, trainable
        finish(algorithm, task, state, result, ctx) -> None          where the result goes

    Behaviour is not part of a task's identity (equality and hashing read the
    fields above it only), so ``dataclasses.replace(task, loss=...)`` is the same
    task with another loss.
    """

    name: str
    model: str
    mode: Literal["train", "infer", "compute"] = "train"
    split: str = "train"
    also: tuple[tuple[str, int], ...] = ()
    uploads: bool = False
    start: Callable[..., ModelState] | None = field(default=None, compare=False, repr=False)
    constants: Callable[..., TensorDict] | None = field(default=None, compare=False, repr=False)
    loss: Callable[..., Loss] | None = field(default=None, compare=False, repr=False)
    schedule: Callable[..., Schedule] | None = field(default=None, compare=False, repr=False)
    finish: Callable[..., None] | None = field(default=None, compare=False, repr=False)

    @property
    def splits(self) -> tuple[str, ...]:
        """Every split this task reads, its own first."""
        return (self.split, *(s for s, _ in self.also))

    def batch_sizes(self, schedule: Schedule) -> dict[str, int]:
        """Per split read, the batch size of a step (the task's own split first)."""
        return {self.split: schedule.batch_size, **dict(self.also)}


@dataclass(frozen=True, slots=True)
class RoundContext:
    """Who and when, handed to every hook that depends on it.

    ``client`` is :data:`SERVER` on the server and None for a broadcast downlink.
    """

    round: int
    client: int | None
    num_samples: Mapping[str, int]
    seed: int
    received: Payload | None = None
    """What the client received this round (its job's payload), if anything."""

    def rng(self, *key: object) -> np.random.Generator:
        """The algorithm's random stream for this (round, client, *key)."""
        return numpy_rng(self.seed, "algorithm", self.round, self.client, *key)

    def generator(self, *key: object) -> torch.Generator:
        """A torch generator on the algorithm's stream for this (round, client, *key)."""
        generator = torch.Generator()
        generator.manual_seed(int(self.rng(*key).integers(2**62)))
        return generator


@dataclass(frozen=True, slots=True)
class Upload:
    """One client's upload as the server receives it."""

    client: int
    payload: Payload
    num_samples: int
    weight: float | None = None
    """Aggregation weight; None means ``num_samples`` (async protocols set it)."""

    @property
    def aggregation_weight(self) -> float:
        return self.num_samples if self.weight is None else self.weight


def uploaded_elements(uploads: Sequence[Upload]) -> int:
    """Tensor elements the uploads hold, in all (a payload shared by many uploads, as in
    cost-only job classes, is counted by its size once and then by reference)."""
    elements = by_identity(lambda payload: sum(t.numel() for t in payload.values()))
    return sum(elements(upload.payload) for upload in uploads)


class Algorithm:
    """Base class of every FL/PFL algorithm; see the module docstring for the hooks."""

    Settings: ClassVar[type[AlgorithmSettings]] = AlgorithmSettings
    tasks: ClassVar[tuple[Task, ...]] = ()
    broadcast: ClassVar[bool] = True
    """True: one downlink payload for all selected clients; False: one per client."""
    protocols: ClassVar[frozenset[str] | None] = None
    """Protocols this algorithm runs under; None means every protocol."""
    payload_from_training: ClassVar[str] = ""
    """Non-empty (saying what) when what a client sends depends on trained values (BLS's
    layer selection), so cost-only runs, which train nothing, are refused."""
    heterogeneous: ClassVar[bool] = False
    """Whether clients may have different architectures."""
    public_data: ClassVar[Literal["none", "unlabeled", "labeled"]] = "none"
    """Whether clients use the public split, and whether they see its labels."""
    client_blind_costs: ClassVar[bool] = False
    """True when a job's FLOPs, steps, upload and new state depend on the client only
    through the shapes of its state and payload and the sizes of its splits (no
    per-client draw, no client id in a hook): cost-only runs then run one job per class
    of equal inputs and share its results (:mod:`mecsim.executors.cost_only`).
    ``mecsim check`` tests the claim."""

    def __init__(
        self,
        settings: AlgorithmSettings,
        models: ModelCatalog,
        label_counts: Sequence[Tensor] | None = None,
        seed: int = 0,
    ) -> None:
        """Args:
        settings: the scenario's ``[algorithm]`` table, validated by ``Settings``.
        models: the run's architectures and each client's (initial states seeded).
        label_counts: each client's training label counts (None in cost-only runs).
        seed: the scenario seed (the algorithm's random streams derive from it).
        """
        self.settings = settings
        self.models = models
        self.label_counts = list(label_counts) if label_counts is not None else None
        self.seed = seed
        self.check_tasks(self.round_tasks(0))

    def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Task names are unique and at most one task uploads."""
        name = type(self).__name__
        if not tasks:
            raise NotImplementedError(f"{name} declares no tasks")
        if len({t.name for t in tasks}) != len(tasks):
            raise ValueError(f"{name}: task names must be unique")
        if sum(t.uploads for t in tasks) > 1:
            raise ValueError(f"{name}: at most one task may upload")

    @property
    def initial(self) -> ModelState:
        """The initial state of the default (server) architecture."""
        return self.models.default.initial

    def arch(self, client: int | None) -> Architecture:
        """The architecture of ``client`` (the default one for the server or a broadcast)."""
        return self.models.of(-1 if client is None else client)

    # --- state -----------------------------------------------------------------------
    def init_server_state(self) -> ServerState:
        """Server state before round 0. Default: empty."""
        return {}

    def init_client_state(self, client: int) -> ClientState:
        """Client state before round 0 (required)."""
        raise NotImplementedError(self)

    # --- communication ---------------------------------------------------------------
    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload | None:
        """What the server sends (``ctx.client`` is None for a broadcast). Default: nothing."""
        return None

    def receive(self, state: ClientState, payload: Payload, ctx: RoundContext) -> None:
        """A client that runs no task this round received ``payload`` (wait-free
        broadcasts to unselected clients). Default: ignore it."""

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload | None:
        """What a client sends after its uploading task. Default: nothing."""
        return None

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        """New server state from this round's uploads. Default: unchanged."""
        return server_state

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        """Server FLOPs of :meth:`aggregate`. Default: 2 per uploaded element (scale + add)."""
        return 2 * uploaded_elements(uploads)

    def mix(
        self, server_state: ServerState, upload: Upload, weight: float, ctx: RoundContext
    ) -> ServerState:
        """Asynchronous update ``w <- (1 - weight) w + weight * upload`` on the uploaded keys.

        Default: :meth:`aggregate` of the current broadcast payload (weight
        ``1 - weight``) and the upload (``weight``); per-key averaging leaves
        keys the upload lacks unchanged.
        """
        current = self.downlink(server_state, RoundContext(ctx.round, None, {}, ctx.seed))
        if current is None:
            raise NotImplementedError(f"{type(self).__name__} defines no asynchronous mix")
        pair = [
            Upload(SERVER, current, 0, weight=1.0 - weight),
            Upload(upload.client, upload.payload, upload.num_samples, weight=weight),
        ]
        return self.aggregate(server_state, pair, ctx)

    def prepare_downlinks(
        self, server_state: ServerState, selected: Sequence[int], ctx: RoundContext
    ) -> ServerState:
        """Server work that depends on the round's selection, before its downloads
        (KAPC slices its relationship cube by it, Algorithm 5). Default: unchanged."""
        return server_state

    def preparation_flops(self, server_state: ServerState, selected: Sequence[int]) -> int:
        """Server FLOPs of :meth:`prepare_downlinks` (timed before the downloads). Default: 0."""
        return 0

    # --- client tasks ----------------------------------------------------------------
    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        """The client tasks of ``round_``, in order. Default: the class attribute ``tasks``."""
        return self.tasks

    def server_tasks(self, round_: int) -> tuple[Task, ...]:
        """Server tasks run after :meth:`aggregate` on the server state. Default: none."""
        return ()

    def schedule(self, task: Task) -> Schedule:
        """Training schedule of ``task``. Default: the algorithm settings' SGD schedule."""
        s = self.settings
        return Schedule(
            s.epochs,
            s.steps,
            s.batch_size,
            s.lr,
            s.momentum,
            s.weight_decay,
            max_grad_norm=s.max_grad_norm or None,
        )

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        """The model ``task`` starts from. Default: the client's own ``state[task.model]``."""
        return state[task.model]

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        """Constant tensors the loss reads (e.g. the global weights). Default: none."""
        return {}

    def loss(self, task: Task) -> Loss:
        """The loss of ``task``. Default: cross-entropy on the task's split."""
        from mecsim.algorithms.losses import cross_entropy_loss

        return cross_entropy_loss(task.split)

    def compute(self, task: Task, state: ClientState, ctx: RoundContext) -> int:
        """Run a ``mode="compute"`` task on the client's ``state``; return its FLOPs.

        The work is timed and metered like training (a ``compute:<task>`` row at
        these FLOPs on the client's device). Required for such a task.
        """
        raise NotImplementedError(f"{type(self).__name__} declares a compute task {task.name!r}")

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        """Store the result. Default: ``state[task.model] = result.state``."""
        state[task.model] = result.state

    # --- evaluation ------------------------------------------------------------------
    def generic_model(self, server_state: ServerState) -> ModelState | None:
        """Model evaluated on the global test set. Default: none."""
        return None

    def personal_model(
        self, client_state: ClientState, server_state: ServerState
    ) -> ModelState | None:
        """Model evaluated on the client's local test split. Default: none."""
        return None


# --- what the engine asks: a task's own behaviour first, else the algorithm's hook ---------
def start_of(
    algorithm: Algorithm, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> ModelState:
    """The model ``task`` starts from."""
    if task.start is not None:
        return task.start(algorithm, task, state, payload, ctx)
    return algorithm.begin_task(task, state, payload, ctx)


def constants_of(
    algorithm: Algorithm, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> TensorDict:
    """The constant tensors ``task``'s loss reads."""
    if task.constants is not None:
        return task.constants(algorithm, task, state, payload, ctx)
    return algorithm.task_constants(task, state, payload, ctx)


def loss_of(algorithm: Algorithm, task: Task) -> Loss:
    """``task``'s loss."""
    return task.loss(algorithm, task) if task.loss is not None else algorithm.loss(task)


def schedule_of(algorithm: Algorithm, task: Task) -> Schedule:
    """``task``'s training schedule."""
    if task.schedule is not None:
        return task.schedule(algorithm, task)
    return algorithm.schedule(task)


def finish(
    algorithm: Algorithm, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
) -> None:
    """Store ``task``'s result in the client's (or server's) state."""
    if task.finish is not None:
        task.finish(algorithm, task, state, result, ctx)
    else:
        algorithm.end_task(task, state, result, ctx)
