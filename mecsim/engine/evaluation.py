"""Evaluation: generic model on the global test set, personalized models on local tests.

Evaluation costs wall time but no simulated time. The personalized accuracy
is a mean of per-client local-test accuracies, as ``evaluation.personal_mean``
says (:func:`personal_mean`): weighted by training-sample counts (the default,
spectral co-distillation's appendix B), by local-test sizes, plain over all
clients (COMET, PersFL) or plain over the round's selected clients (KAPC); the
standard deviation of the same clients' accuracies (``evaluation.std_ddof``)
is kept as a fairness metric. A client with an empty local test set has no
accuracy (NaN in its row) and is left out of both, with one logged warning
when the evaluator is built.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from mecsim.algorithms.base import Algorithm, ClientState, ServerState
from mecsim.executors.calibration import PROBE_CLIENTS, SERIAL_MARGIN, timed
from mecsim.learning.models.catalog import ModelCatalog
from mecsim.learning.state import ModelState
from mecsim.learning.training import predict, predict_many

log = logging.getLogger(__name__)


def personal_mean(
    accuracies: Sequence[float],
    train_sizes: Sequence[int],
    test_sizes: Sequence[int],
    mean: str = "train_size",
    selected: Sequence[int] | None = None,
    ddof: int = 0,
) -> tuple[float, float]:
    """(mean, std) of the clients' accuracies under the ``mean`` convention.

    Clients without an accuracy (NaN) are left out; ``selected`` (the round's
    clients) is read by ``mean = "selected"``. The std is unweighted over the
    clients the mean reads (NaN where fewer than ``ddof + 1`` remain).
    """
    acc = np.asarray(accuracies, dtype=float)
    scored = ~np.isnan(acc)
    if mean == "selected":
        chosen = np.zeros_like(scored)
        chosen[[c for c in (selected or ()) if c < len(acc)]] = True
        scored &= chosen
    if not scored.any():
        return math.nan, math.nan
    weights = {
        "train_size": np.asarray(train_sizes, dtype=float)[: len(acc)],
        "test_size": np.asarray(test_sizes, dtype=float)[: len(acc)],
    }.get(mean, np.ones(len(acc)))
    value = float(np.average(acc[scored], weights=weights[scored]))
    std = float(acc[scored].std(ddof=ddof)) if scored.sum() > ddof else math.nan
    return value, std


@dataclass(frozen=True)
class Evaluation:
    """Accuracies after one round; NaN where the algorithm has no such model."""

    generic_acc: float
    personal_acc: float
    personal_acc_std: float
    client_acc: tuple[float, ...]


class Evaluator:
    """Evaluates an algorithm's models on the global and the clients' local test data.

    The generic model runs on the default architecture; each client's
    personalized model on that client's own architecture.
    """

    def __init__(
        self,
        models: ModelCatalog,
        x_test: Tensor,
        y_test: Tensor,
        local_test: Sequence[Tensor],
        weights: Sequence[int],
        batched: bool | None = False,
        mean: str = "train_size",
        ddof: int = 0,
        global_size: int | None = None,
        first_client: int = 0,
    ) -> None:
        self.models = models
        self.first_client = first_client
        """The client the first local test belongs to (new clients follow the trainers)."""
        self.mean, self.ddof = mean, ddof
        self.global_size = global_size
        """The generic model is scored on the first this many test samples (None: all);
        local tests from the clients' own data follow them."""
        self.batched = batched
        """Predict the clients' distinct personalized models in stacked groups
        (:func:`~mecsim.learning.training.predict_many`, the same labels) instead of one at a
        time; None: decide by timing both on the first evaluation that has such models
        (:meth:`probe`)."""
        self.probe_result: dict[str, float | int | bool] | None = None
        """What that timing measured and decided (``summary.json``: ``evaluation_probe``)."""
        self.x_test, self.y_test = x_test, y_test
        self.local_test = list(local_test)
        self.test_sizes = [len(t) for t in self.local_test]
        self.weights = np.asarray(weights, dtype=float)
        empty = [c for c, t in enumerate(self.local_test) if len(t) == 0]
        if empty:
            log.warning(
                "%d client(s) have an empty local test set and are left out of the "
                "personalized accuracy: %s (raise data.local_test_fraction or use fewer clients)",
                len(empty),
                empty[:10],
            )

    def evaluate(
        self,
        algorithm: Algorithm,
        server_state: ServerState,
        client_states: Sequence[ClientState],
        completed_rounds: int,
        selected: Sequence[int] | None = None,
    ) -> Evaluation:
        """Accuracies of the algorithm's models after ``completed_rounds`` rounds
        (``selected``: the last round's clients, for ``mean = "selected"``)."""
        generic = algorithm.generic_model(server_state)
        generic_acc = math.nan
        if generic is not None:
            n = self.global_size
            generic_acc = self._accuracy(
                predict(self.models.default.module, generic, self.x_test[:n]), self.y_test[:n]
            )
        shared_right = None  # the shared model's right answers over the test pool, 0 / 1
        accuracies = [math.nan] * min(len(client_states), len(self.local_test))
        own: dict[str, list[tuple[int, ModelState]]] = {}  # by architecture
        hits: dict[int, Tensor] = {}  # each client's accuracy, on the device
        for client, (state, indices) in enumerate(
            zip(client_states, self.local_test, strict=False)
        ):
            personal = algorithm.personal_model(state, server_state)
            if personal is None:
                continue
            if personal is generic:  # one shared model: predict and score the test pool once
                if shared_right is None:
                    labels = predict(self.models.default.module, generic, self.x_test)
                    shared_right = (labels == self.y_test).float()
                hits[client] = shared_right[indices].mean()  # the same 0 / 1 vector's mean
            else:
                own.setdefault(self.models.of(self.first_client + client).name, []).append(
                    (client, personal)
                )
        for name, members in own.items():
            module = self.models.architectures[name].module
            inputs = [self.x_test[self.local_test[c]] for c, _ in members]
            states = [m for _, m in members]
            if self.batched is None:
                self.batched = self.probe(module, states, inputs)
            if self.batched:
                predicted = predict_many(module, states, inputs)
            else:
                predicted = [predict(module, m, x) for m, x in zip(states, inputs, strict=True)]
            for (client, _), labels in zip(members, predicted, strict=True):
                hits[client] = self._hit_rate(labels, self.y_test[self.local_test[client]])
        if hits:  # read back once, not once per client
            for client, value in zip(hits, torch.stack([*hits.values()]).tolist(), strict=True):
                accuracies[client] = value
        mean, std = personal_mean(
            accuracies, self.weights, self.test_sizes, self.mean, selected, self.ddof
        )
        return Evaluation(generic_acc, mean, std, tuple(accuracies))

    def probe(
        self, module: nn.Module, states: Sequence[ModelState], inputs: Sequence[Tensor]
    ) -> bool:
        """Whether predicting in stacked groups is faster, timed on up to
        :data:`PROBE_CLIENTS` of these clients each way (after a warm-up): batched
        unless one at a time is clearly faster (:data:`SERIAL_MARGIN`), as for training.
        On 2 CPU cores cnn-small predicts 6-8x faster in groups on 8x8 digits and
        1.1-1.7x on 28x28 images; models without a hand-batched forward are vmapped,
        where 28x28 inputs predicted about 1.4x slower in groups."""
        k = min(PROBE_CLIENTS, len(states))
        device = inputs[0].device
        states, inputs = states[:k], inputs[:k]

        def one_at_a_time() -> None:
            for state, x in zip(states, inputs, strict=True):
                predict(module, state, x)

        def grouped() -> None:
            predict_many(module, states, inputs)

        one_at_a_time(), grouped()  # warm-up
        serial_s, batched_s = timed(one_at_a_time, device), timed(grouped, device)
        batched = not serial_s * SERIAL_MARGIN < batched_s
        self.probe_result = {
            "batched": batched,
            "serial_s": serial_s,
            "batched_s": batched_s,
            "probe_clients": k,
        }
        return batched

    @staticmethod
    def _hit_rate(predictions: Tensor, labels: Tensor) -> Tensor:
        """The share of right predictions, a float32 scalar on their device (NaN if none)."""
        return (predictions == labels).float().mean()

    @classmethod
    def _accuracy(cls, predictions: Tensor, labels: Tensor) -> float:
        return float(cls._hit_rate(predictions, labels)) if len(labels) else math.nan


class CurveEvaluator:
    """Cost-only "evaluation": accuracy read off a user-supplied (round, accuracy) curve.

    The curve's x is the rounds table's ``round`` (0-based): the row of round
    r reads the curve at r, that is after r + 1 completed rounds. It is
    linearly interpolated and reported as both generic and personalized
    accuracy; without a curve, accuracy is NaN (omitted).
    """

    def __init__(self, curve: Sequence[tuple[float, float]] | None) -> None:
        self.curve = np.asarray(curve, dtype=float) if curve else None

    def evaluate(
        self,
        algorithm: Algorithm,
        server_state: ServerState,
        client_states: Sequence[ClientState],
        completed_rounds: int,
        selected: Sequence[int] | None = None,
    ) -> Evaluation:
        if self.curve is None:
            return Evaluation(math.nan, math.nan, math.nan, ())
        row = completed_rounds - 1  # the rounds table's ``round`` of this evaluation
        acc = float(np.interp(row, self.curve[:, 0], self.curve[:, 1]))
        return Evaluation(acc, acc, 0.0, ())
