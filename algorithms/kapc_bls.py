"""KAPC with bidirectional layer selection (paper 004, Sec. 5-6, Algorithms 3-6).

KAPC (:mod:`mecsim.algorithms.kapc`), with fewer layers on the air each way:

* Server (Algorithm 3): layer l of s_i is not sent to client i when its
  self-relationship r^l_ii exceeds ``mu``: s_i would mostly be w_i itself.
* Client (Algorithms 4 and 6): after training, a timed task of its own
  (``compute:select_layers``) measures the bounds (30)-(31) and searches
  Omega_i, and the client uploads only its first Omega_i layers.
* Missing layers keep stale values on both sides (eqs. 33-34): the server
  mixes a client's last received layer; a client regularizes a layer it did
  not receive, and every layer beyond its Omega_i (which the server holds
  stale), toward its own model of the last round: eq. (20)'s partial-layered
  regularizer, s^l for l <= Omega_i and w-hat^l beyond.

Criterion (29), reconstructed
-----------------------------

The extracted text of eqs. (23)-(29) is garbled; this is the reading taken.
Theorem 4 bounds the generalization gap of the partial regularizer (the
first Omega layers) as

    Gap(Omega) = 2 sqrt2 d_Omega rho A_i 2^Omega prod_{l<=Omega} B^l M(Omega) / sqrt(m_i)
                 + 3 (b - a) sqrt(log(2/delta) / (2 m_i))                      (26)

    M(Omega) = sum_{l<=Omega} tau^l / (2 B^l) prod_{l<j<=Omega} sqrt(n^j)

(the text's tau^Omega / 2B^Omega + sum_{k=1}^{Omega-1} tau^{Omega-k}
prod_{j=1}^{k} sqrt(n^{Omega+1-j}) / 2B^{Omega-k}, indexed by layer), and
Theorem 3 is the same with Omega = L and c_i for d_L. Definition 1 asks that
the gap per shared layer fall: Gap(Omega) / Omega < Gap(L) / L. Dividing by
Omega 2 sqrt2 c_i rho A_i 2^L prod_{l<=Omega} B^l / sqrt(m_i) gives (28), and
dropping its second term, which the paper calls almost zero, gives

    L d_Omega M(Omega) / (Omega c_i 2^(L - Omega))  <  M(L) prod_{l>Omega} B^l      (29)

with B^l = ||w^l_i|| (30), tau^l = ||w^l_i - s^l_i|| (31), n^l the number of
columns of w^l (a conv's in-channels x kernel area, a linear layer's inputs),
d_Omega the output width of layer Omega and c_i the number of classes in
client i's training data. At Omega = L both sides hold M(L) and (29) reads
d_L < c_i, which never holds for a classifier head: Omega = L is reached only
by the upward search's cap, and Algorithm 4 resets it to L - 1.

Constants the paper leaves open: rho (the loss's Lipschitz constant), A_i
(the input norm bound), the loss range [a, b] and delta multiply both sides
of (27) alike or appear only in the second term of (28) that (29) drops, so
(29) needs none of them, and neither does it need m_i (it cancels with that
term). No value is chosen for them because none is read.

Algorithm 4, as written: a client selected for the first time, or whose
last Omega was L, stores the maximum of its stored and current B and tau and
uploads L - 1 layers (lines 3-9). Otherwise it stores the current B, and tau
of the layers it received (the rest keep their stale tau, lines 11-14), and
starts from its last Omega: if (29) holds it decreases Omega *until (29) no
longer holds*; else it increases Omega *until (29) holds* (lines 15-24),
within [1, L]. The search returns where the repeat-until stops (a literal
reading: the first Omega below that fails, not the last one that held).

What this reading does, measured (see the README, "KAPC + BLS"): (29)'s
right side carries prod_{l>Omega} B^l and, through M(L), the roots of the
deeper layers' column counts, so with Frobenius norms above 1 it holds at
almost every Omega < L, and the search walks down to 1 for clients with many
classes; clients with few classes (c_i small) fail (29) at L - 1 and cycle
between L - 1 and L. The paper's Fig. 8 (19 of 21 layers in most rounds)
does not follow from (29) with these quantities, and its authors' code is
not public; mecsim computes what the paper writes and reports what follows.

Client FLOPs of the selection (:func:`selection_flops`): the norms (30)-(31)
cost 5 per parameter (B: square, add; tau: subtract, square, add) and 2 per
layer (square roots); each evaluation of (29) costs 4 per term of M(Omega)
and M(L), 1 per bound of the product and 8 for the constants and the
comparison. It is timed on the client's device as the ``compute:select_layers``
phase, before the upload.

* ``mu`` = 0.7 (Table 6); ``client_selection = false`` disables Algorithm 4
  (Omega = L, no selection task).
* Cost-only runs, which train nothing, are refused (the bytes of each upload
  and download depend on trained values).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import ClientState, RoundContext, ServerState, Task
from mecsim.algorithms.kapc import KAPC, KAPCSettings
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.models.layers import Layer
from mecsim.learning.state import Payload, TensorDict


class KAPCBLSSettings(KAPCSettings):
    mu: float = Field(default=0.7, ge=0, description="self-relationship threshold (Algorithm 3)")
    client_selection: bool = Field(
        default=True, description="choose the uploaded layers by criterion (29) (Algorithm 4)"
    )
    search: Literal["literal", "boundary"] = Field(
        default="boundary",
        description="Algorithm 4's search: boundary (while (29) holds, go deeper until it "
        "fails; else shallower until it holds: Table 3's savings, Fig. 8's depth) | literal "
        "(as printed: while (29) holds, go shallower; walks to 1 layer or cycles L-1, L)",
    )
    class_count: Literal["present", "outputs"] = Field(
        default="present",
        description="c_i in (29): the classes present in the client's training data, or the "
        "model's outputs (Theorem 4 at Omega = L is then Theorem 3)",
    )


def layer_norms(tensors: TensorDict, layers: tuple[Layer, ...]) -> Tensor:
    """Frobenius norm of each layer's parameters, [L] (eqs. 30-31)."""
    return torch.stack(
        [
            torch.sqrt(sum((tensors[k].double() ** 2).sum() for k in layer.param_names))
            for layer in layers
        ]
    )


def log_bound_sum(bounds: Tensor, gaps: Tensor, columns: Tensor, depth: int) -> float:
    """log M(depth), M(depth) = sum_{l <= depth} tau^l / (2 B^l) prod_{l < j <= depth} sqrt(n^j).

    In logs, so that deep networks' products neither overflow nor underflow.
    """
    log_root = 0.5 * torch.log(columns[:depth].double())
    # suffix sums: for layer l, sum_{l < j <= depth} log sqrt(n^j)
    above = torch.flip(torch.cumsum(torch.flip(log_root, [0]), 0), [0]) - log_root
    terms = torch.log(gaps[:depth]) - math.log(2.0) - torch.log(bounds[:depth]) + above
    return float(torch.logsumexp(terms, 0))


def criterion(
    depth: int, bounds: Tensor, gaps: Tensor, columns: Tensor, widths: list[int], classes: int
) -> bool:
    """Inequality (29): sharing the first ``depth`` layers lowers the gap per shared layer."""
    layers = len(bounds)
    # in logs, the terms that cancel at Omega = L grouped so that they cancel exactly
    # there: (29) at L reads d_L < c_i, never 1 ulp of rounding
    ratio = math.log(layers * widths[depth - 1]) - math.log(depth * classes)
    sums = log_bound_sum(bounds, gaps, columns, depth) - log_bound_sum(
        bounds, gaps, columns, layers
    )
    lhs = ratio + sums - (layers - depth) * math.log(2.0)
    return lhs < float(torch.log(bounds[depth:]).sum())


def criterion_flops(depth: int, layers: int) -> int:
    """FLOPs of one evaluation of (29) (see the module docstring)."""
    return 4 * (depth + layers) + (layers - depth) + 8


def search_depth(
    start: int,
    bounds: Tensor,
    gaps: Tensor,
    columns: Tensor,
    widths: list[int],
    classes: int,
    search: str = "literal",
) -> tuple[int, list[int]]:
    """Algorithm 4, lines 15-24, from Omega = ``start``: (Omega, the depths evaluated).

    ``literal``: while (29) holds, Omega decreases (until it fails), else increases
    (until it holds). ``boundary``: the same repeat-untils with the test negated:
    while (29) holds Omega increases (until it fails), else it decreases (until it
    holds), so Omega settles where (29) changes, the deepest layers it allows.
    """
    layers = len(bounds)
    depth = min(max(start, 1), layers)
    evaluated: list[int] = []

    def holds(d: int) -> bool:
        evaluated.append(d)
        return criterion(d, bounds, gaps, columns, widths, classes)

    shallower_while_holding = search == "literal"
    held = holds(depth)
    step = -1 if held == shallower_while_holding else 1
    while 1 <= depth + step <= layers:  # repeat Omega <- Omega +- 1 until the test flips
        depth += step
        if holds(depth) != held:
            break
    return depth, evaluated


def selection_flops(params: int, layers: int, evaluated: list[int]) -> int:
    """Client FLOPs of Algorithm 4: the norms (30)-(31) and each evaluation of (29)."""
    return 5 * params + 2 * layers + sum(criterion_flops(d, layers) for d in evaluated)


@ALGORITHMS.register("kapc_bls", "KAPC + bidirectional layer selection (mu; criterion (29))")
class KAPCBLS(KAPC):
    """KAPC that leaves out self-coached layers going down and deep layers going up."""

    payload_from_training = "the layers of each upload and download, criteria (29) and mu"

    Settings = KAPCBLSSettings
    selecting = (
        Task("local", model="local"),
        Task("select_layers", model="local", mode="compute", uploads=True),
    )

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        """Algorithm 6: train (Algorithm 2), then select the uploaded layers (Algorithm 4)."""
        return self.selecting if self.settings.client_selection else self.tasks

    def downlink_keys(self, server_state: ServerState, client: int) -> list[str]:
        """Algorithm 3: the layers whose self-relationship is at most mu."""
        cube, mu = server_state["cube"], self.settings.mu
        return [
            k
            for index, layer in enumerate(self.layers)
            if float(cube[client, index, client]) <= mu
            for k in layer.param_names
        ]

    def init_client_state(self, client: int) -> ClientState:
        layers = len(self.layers)
        zeros = torch.zeros(layers, dtype=torch.float64)
        return {
            **super().init_client_state(client),
            "omega": layers,
            "times": 0,
            "B": zeros,
            "tau": zeros,
        }

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        """The partial-layered regularizer of eq. (20): s_i's layers up to the client's
        Omega_i (as received; a layer not received, KAPC's own model), and beyond it the
        client's own model of the last round, w-hat, whose layers the server holds stale."""
        constants = super().task_constants(task, state, payload, ctx)
        own = state["local"].params
        beyond = {k for layer in self.layers[state["omega"] :] for k in layer.param_names}
        return {k: own[k] if k in beyond else v for k, v in constants.items()}

    def classes(self, client: int) -> int:
        """c_i: the classes present in the client's training data (``class_count =
        "present"``), or the model's outputs (``"outputs"``, also without label counts)."""
        if self.label_counts is None or self.settings.class_count == "outputs":
            return int(
                self.arch(client).initial.params[self.arch(client).head.param_names[0]].shape[0]
            )
        return int((self.label_counts[client] > 0).sum())

    def compute(self, task: Task, state: ClientState, ctx: RoundContext) -> int:
        """Algorithm 6, lines 6-7: Omega_i by Algorithm 4, then count the selection."""
        state["omega"], flops = self.select_layers(state, state["local"].params, ctx)
        state["times"] += 1
        return flops

    def select_layers(
        self, state: ClientState, trained: TensorDict, ctx: RoundContext
    ) -> tuple[int, int]:
        """Algorithm 4: (Omega_i, its FLOPs), updating the client's stored B and tau."""
        layers = self.layers
        total = len(layers)
        params = sum(trained[k].numel() for layer in layers for k in layer.param_names)
        received = ctx.received or {}
        regularizer = {k: received.get(k, trained[k]) for k in trained}
        bounds = layer_norms(trained, layers)
        gaps = layer_norms({k: trained[k] - regularizer[k] for k in trained}, layers)
        if state["times"] == 0 or state["omega"] == total:  # lines 3-9
            state["B"] = torch.maximum(state["B"], bounds)
            state["tau"] = torch.maximum(state["tau"], gaps)
            return total - 1, selection_flops(params, total, [])
        got = torch.tensor([all(k in received for k in layer.param_names) for layer in layers])
        state["B"] = bounds
        state["tau"] = torch.where(got, gaps, state["tau"])
        weights = [trained[layer.param_names[0]] for layer in layers]
        widths = [int(w.shape[0]) for w in weights]
        columns = torch.tensor([w.numel() // max(w.shape[0], 1) for w in weights])
        depth, evaluated = search_depth(
            state["omega"],
            state["B"],
            state["tau"],
            columns,
            widths,
            self.classes(ctx.client),
            self.settings.search,
        )
        return depth, selection_flops(params, total, evaluated)

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        """The first Omega_i layers (parameters and buffers)."""
        keys = self.arch(ctx.client).layer_keys(self.layers[: state["omega"]])
        return state["local"].select(keys)
