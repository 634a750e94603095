"""The algorithm interface: a handful of hooks plus a loss term.

An algorithm never sleeps, never reads the clock and never writes an SGD
loop. It declares:

* ``Settings`` — its scenario keys (a pydantic subclass of
  :class:`~mecsim.scenario.AlgorithmSettings`);
* state — :meth:`init_server_state` and :meth:`init_client_state` (dicts of
  :class:`~mecsim.state.ModelState` or tensors);
* what goes down — :meth:`downlink` (one broadcast payload, or one payload
  per client when ``broadcast`` is False) — and what goes up — :meth:`upload`;
* client work — ``tasks``, an ordered tuple of :class:`Task`; exactly one may
  be marked ``uploads``. Compute-and-wait runs every task then uploads; a
  wait-free protocol uploads right after the marked task;
* per task — the model it starts from (:meth:`begin_task`), its loss term
  (:meth:`loss_term`) with tensors it needs (:meth:`task_context`), and where
  the trained model goes (:meth:`end_task`);
* :meth:`aggregate` on the server;
* what is evaluated — :meth:`generic_model` on the global test set and
  :meth:`personal_model` on each client's local test split.

Required: ``tasks`` and :meth:`init_client_state`. Every other hook has a
default that does nothing (returns ``None`` / an empty payload / the state
unchanged); the defaults are documented on each hook.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from mecsim.scenario import AlgorithmSettings
from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import LossTerm, Schedule

ClientState = dict[str, Any]
ServerState = dict[str, Any]


@dataclass(frozen=True)
class Task:
    """A named unit of client work.

    Args:
        name: shown in the events table's ``phase`` column (``compute:<name>``).
        model: key of the client-state model this task trains.
        uploads: the upload payload is ready once this task ends.
    """

    name: str
    model: str
    uploads: bool = False


@dataclass(frozen=True)
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


class Algorithm:
    """Base class of every FL/PFL algorithm; see the module docstring for the hooks."""

    Settings: ClassVar[type[AlgorithmSettings]] = AlgorithmSettings
    tasks: ClassVar[tuple[Task, ...]] = ()
    broadcast: ClassVar[bool] = True
    """True: one downlink payload for all selected clients; False: one per client."""

    def __init__(
        self,
        settings: AlgorithmSettings,
        initial: ModelState,
        label_counts: Sequence[Tensor] | None = None,
    ) -> None:
        """Args:
        settings: the scenario's ``[algorithm]`` table, validated by ``Settings``.
        initial: the initial model, shared by server and clients (seeded).
        label_counts: each client's training label counts (None in cost-only runs).
        """
        self.settings = settings
        self.initial = initial
        self.label_counts = list(label_counts) if label_counts is not None else None
        uploading = [t.name for t in self.tasks]
        if not self.tasks:
            raise NotImplementedError(f"{type(self).__name__} declares no tasks")
        if len({t.name for t in self.tasks}) != len(uploading):
            raise ValueError(f"{type(self).__name__}: task names must be unique")
        if sum(t.uploads for t in self.tasks) > 1:
            raise ValueError(f"{type(self).__name__}: at most one task may upload")

    # --- state -----------------------------------------------------------------------
    def init_server_state(self) -> ServerState:
        """Server state before round 0. Default: empty."""
        return {}

    def init_client_state(self, client: int) -> ClientState:
        """Client state before round 0 (required)."""
        raise NotImplementedError(self)

    # --- communication ---------------------------------------------------------------
    def downlink(self, server_state: ServerState, client: int | None) -> Payload | None:
        """What the server sends: ``client`` is None for a broadcast. Default: nothing."""
        return None

    def receive(self, state: ClientState, payload: Payload) -> None:
        """A client that runs no task this round received ``payload`` (wait-free
        broadcasts to unselected clients). Default: ignore it."""

    def upload(self, client_state: ClientState) -> Payload | None:
        """What a client sends after its uploading task. Default: nothing."""
        return None

    def aggregate(self, server_state: ServerState, uploads: list[Upload]) -> ServerState:
        """New server state from this round's uploads. Default: unchanged."""
        return server_state

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        """Server FLOPs of :meth:`aggregate`. Default: 2 per uploaded element (scale + add)."""
        return 2 * sum(t.numel() for u in uploads for t in u.payload.values())

    # --- client tasks ----------------------------------------------------------------
    def schedule(self, task: Task) -> Schedule:
        """Training schedule of ``task``. Default: the algorithm settings' SGD schedule."""
        s = self.settings
        return Schedule(s.epochs, s.steps, s.batch_size, s.lr, s.momentum, s.weight_decay)

    def begin_task(self, task: Task, state: ClientState, payload: Payload | None) -> ModelState:
        """The model ``task`` starts from. Default: the client's own ``state[task.model]``."""
        return state[task.model]

    def task_context(self, task: Task, state: ClientState, payload: Payload | None) -> TensorDict:
        """Tensors the loss term reads (e.g. the global weights). Default: none."""
        return {}

    def loss_term(self, task: Task) -> LossTerm | None:
        """Extra loss ``term(params, context)`` added to cross-entropy. Default: none."""
        return None

    def extra_flops(self, task: Task, start: ModelState, steps: int) -> int:
        """FLOPs of the loss term that forward hooks cannot see. Default: 0."""
        return 0

    def end_task(self, task: Task, state: ClientState, trained: ModelState) -> None:
        """Store the trained model. Default: ``state[task.model] = trained``."""
        state[task.model] = trained

    # --- evaluation ------------------------------------------------------------------
    def generic_model(self, server_state: ServerState) -> ModelState | None:
        """Model evaluated on the global test set. Default: none."""
        return None

    def personal_model(
        self, client_state: ClientState, server_state: ServerState
    ) -> ModelState | None:
        """Model evaluated on the client's local test split. Default: none."""
        return None


def l2_distance_squared(params: TensorDict, reference: TensorDict) -> Tensor:
    """sum over parameters of ||params - reference||^2 (keys of ``reference``)."""
    return sum(((params[k] - reference[k]) ** 2).sum() for k in reference)  # type: ignore[return-value]
