"""``mecsim check ALGORITHM``: the conformance suite any algorithm, built-in or plug-in, must pass.

For every protocol the algorithm declares, two rounds of a tiny scenario
(digits, 4 clients, cnn-small-bn, 2 SGD steps a task, a server's own training as short,
two cluster models) run on the serial and the batched executor, and cost-only where the
algorithm allows it. Checks:

* ``bytes``: every upload's and download's bytes are the nbytes of the payload
  the algorithm returned (a download may be any payload the server built);
* ``flops``: every ``compute:`` row has positive FLOPs, and every operation a
  training step runs on weights (not per sample) is priced by a rule of
  :mod:`mecsim.learning.models.elementwise` or only moves data;
* ``executors``: serial and batched write the same events table (times, bytes,
  FLOPs) and accuracies within 0.05;
* ``cost-only``: a cost-only run (no training) has the serial run's events table,
  or is refused because the algorithm's payload depends on training;
* ``classes`` (algorithms that declare ``client_blind_costs``): a cost-only run of
  8 clients with two sample counts, where the executor runs one job per class of
  alike clients and shares its result, writes the events table of the same run
  with every job run;
* ``mix`` (asynchronous protocols): every server update is the convex mix
  ``(1 - a) w + a w_i`` of the broadcast model and the upload on the uploaded
  entries, and leaves the rest alone; the default ``mix`` hands ``aggregate`` a
  weighted pair, and an ``aggregate`` that ignores ``Upload.aggregation_weight``
  fails here instead of mis-weighting silently;
* ``resume`` (under the algorithm's first protocol; ``tests/engine/test_checkpoint.py``
  covers every protocol): a run interrupted after round 1 and resumed from its
  checkpoint writes the uninterrupted run's events and rounds tables and ends in
  its server and client states.

The built-in algorithms are held to it by ``tests/commands/test_conformance.py``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

TINY: dict[str, Any] = {
    "name": "conformance",
    "seed": 3,
    "data": {"dataset": "digits", "partition": "dirichlet", "alpha": 1.0},
    "model": {"name": "cnn-small-bn"},
    "algorithm": {"name": "fedavg", "steps": 2, "batch_size": 16, "lr": 0.05, "momentum": 0.5},
    "protocol": {"rounds": 2},
    "clients": {"count": 4},
    "output": {"progress": False},
}
"""The scenario every check runs (about a second a run)."""

PROTOCOL_KEYS = {
    "deadline": ["protocol.deadline_s=60"],
    "fedbuff": ["protocol.buffer_size=2"],
    "fedasync": ["protocol.concurrency=2"],
}
SHORT = {"personal_steps": 2, "head_steps": 2, "finetune_steps": 2, "inner_steps": 2,
         "generator_steps": 2, "distill_steps": 2, "kmeans_iterations": 2, "transfer_epochs": 1,
         "clusters": 2}  # fmt: skip
"""Keep every task short, whatever its schedule key is called (and few cluster models)."""


@dataclass
class Outcome:
    """One check of one protocol: passed, or what failed."""

    protocol: str
    check: str
    problems: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def protocols_of(name: str) -> list[str]:
    """The protocols algorithm ``name`` declares (all registered ones when it says None),
    less those that cannot run it (a protocol's ``supports``)."""
    from mecsim.algorithms import ALGORITHMS
    from mecsim.protocols import PROTOCOLS

    algorithm = ALGORITHMS.get(name)
    kinds = algorithm.protocols or PROTOCOLS.names()
    return sorted(k for k in kinds if getattr(PROTOCOLS.get(k), "supports", bool)(algorithm))


def requirements(name: str, rounds: int, public_size: int, val_fraction: float) -> list[str]:
    """Settings algorithm ``name`` declares it needs in a run of ``rounds`` rounds: a public
    split, a validation split, and (PersFL) its FL rounds before the last, local one."""
    from mecsim.algorithms import ALGORITHMS

    algorithm = ALGORITHMS.get(name)
    out = []
    if algorithm.public_data != "none":
        out.append(f"data.public_size={public_size}")
    if getattr(algorithm, "needs_validation", False):
        out.append(f"data.val_fraction={val_fraction}")
    if getattr(algorithm, "required_rounds", None) is not None:
        out.append(f"algorithm.fl_rounds={rounds - 1}")
    return out


def overrides(name: str, kind: str) -> list[str]:
    """The tiny scenario's settings for algorithm ``name`` under protocol ``kind``,
    with what the algorithm declares it needs (:func:`requirements`), every task short."""
    from mecsim.algorithms import ALGORITHMS

    algorithm = ALGORITHMS.get(name)
    fields = algorithm.Settings.model_fields
    out = [f"algorithm.name={name}", f"protocol.kind={kind}", *PROTOCOL_KEYS.get(kind, [])]
    out += [f"algorithm.{k}={v}" for k, v in SHORT.items() if k in fields]
    out += requirements(name, TINY["protocol"]["rounds"], public_size=40, val_fraction=0.3)
    if algorithm.public_data != "none":
        out.append("algorithm.public_batch_size=8")
    if getattr(algorithm, "required_rounds", None) is not None:  # PersFL: a one-point grid
        out += ["algorithm.temperatures=[2]", "algorithm.imitations=[0.5]"]
        out.append("algorithm.distill_epochs=1")
    return [o for o in out if not o.startswith("algorithm.") or o[10:].split("=")[0] in fields]


@contextmanager
def patched(owner: type, name: str, wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """Replace ``owner.name`` by ``wrap(original)`` for the block, then restore it."""
    original = getattr(owner, name)
    replacement = wrap(original)
    if callable(replacement) and callable(original):  # inspect.unwrap finds the original
        functools.update_wrapper(replacement, original)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def recorded(cls: type, hook: str, sent: list):
    """Record ``(round, client, nbytes)`` of every payload ``cls.hook`` returns."""
    from mecsim.executors.base import check_payload
    from mecsim.learning.state import payload_nbytes

    def wrap(original):
        def recording(self, state, ctx, *args):
            payload = original(self, state, ctx, *args)
            check_payload(self, hook, payload)
            if payload:
                sent.append((ctx.round, ctx.client, payload_nbytes(payload)))
            return payload

        return recording

    return patched(cls, hook, wrap)


def mixes(cls: type, seen: list):
    """Record ``(before, upload, weight, after)`` of every ``cls.mix``: the broadcast payload
    before and after, the upload's payload and the mixing weight."""
    from mecsim.algorithms.base import RoundContext

    def wrap(original):
        def recording(self, server_state, upload, weight, ctx):
            broadcast = RoundContext(ctx.round, None, {}, ctx.seed)
            before = self.downlink(server_state, broadcast)
            out = original(self, server_state, upload, weight, ctx)
            seen.append((before, upload.payload, weight, self.downlink(out, broadcast)))
            return out

        return recording

    return patched(cls, "mix", wrap)


def mix_problems(seen: list) -> list[str]:
    """Where an asynchronous update was not ``w <- (1 - a) w + a w_i`` on the uploaded
    entries (and no change elsewhere): an ``aggregate`` that ignored the pair's weights."""
    import torch

    problems = []
    for before, payload, weight, after in seen:
        for key, old in (before or {}).items():
            if not old.is_floating_point():
                continue
            new = payload.get(key)
            expected = old if new is None else (1 - weight) * old + weight * new.to(old.dtype)
            if not torch.allclose(after[key], expected, rtol=1e-4, atol=1e-6):
                problems.append(f"mix at weight {weight:.3g} gave {key} off the convex mix")
                break
    return problems[:3]


class _Stop(BaseException):
    """Stands in for an interruption (SIGINT) at the end of a round."""


def interrupted_after(rounds: int):
    """Raise :class:`_Stop` once ``rounds`` round rows (and their checkpoints) are written."""
    from mecsim.engine.simulation import Simulation

    rows = {"n": 0}

    def wrap(original):
        def end_round(self, *args, **kwargs):
            original(self, *args, **kwargs)
            rows["n"] += 1
            if rows["n"] == rounds:
                raise _Stop

        return end_round

    return patched(Simulation, "end_round", wrap)


def tensors_in(obj: object) -> list:
    """Every tensor inside a state (dicts, lists, tuples, model states), in a fixed order."""
    import torch

    from mecsim.learning.state import ModelState

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, ModelState):
        return tensors_in(obj.params) + tensors_in(obj.buffers)
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in tensors_in(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in tensors_in(item)]
    return []


def resume_problems(settings: list[str]) -> list[str]:
    """Run, interrupt after round 1 and resume; compare with an uninterrupted run."""
    import tempfile
    from pathlib import Path

    import pandas as pd

    import mecsim

    # threads pinned: 'auto' samples the machine's load, and another thread count rounds
    # training's sums otherwise (a loaded machine gave the two runs different counts)
    keys = [*settings, "output.checkpoint_every=1", "execution.threads=1", "output.figures=false"]
    wall = ["wall_s", "wall_train_s"]
    with tempfile.TemporaryDirectory(prefix="mecsim-check-") as tmp:
        whole = mecsim.run(copy.deepcopy(TINY), keys, out=Path(tmp, "whole"), executor="serial")
        try:
            with interrupted_after(1):
                mecsim.run(copy.deepcopy(TINY), keys, out=Path(tmp, "cut"), executor="serial")
        except _Stop:
            pass
        else:
            return ["the run ended before it could be interrupted"]
        resumed = mecsim.run(
            copy.deepcopy(TINY), keys, out=Path(tmp, "cut"), executor="serial", resume=True
        )
        problems = []
        for table in ("events", "rounds"):
            a, b = getattr(whole, table), getattr(resumed, table)
            if table == "rounds":
                a, b = a.drop(columns=wall), b.drop(columns=wall)
            try:
                pd.testing.assert_frame_equal(a, b)
            except AssertionError as error:
                problems.append(f"resumed {table} differ: {str(error).splitlines()[0]}")
        for name in ("server_state", "client_states"):
            a, b = tensors_in(getattr(whole, name)), tensors_in(getattr(resumed, name))
            if len(a) != len(b) or not all(x.equal(y) for x, y in zip(a, b, strict=False)):
                problems.append(f"the resumed run's final {name.replace('_', ' ')} differ")
        return problems


def class_problems(cls: type, settings: list[str]) -> list[str]:
    """Differences between a cost-only run that shares results within classes of alike
    clients and the same run with every job run (the claim ``client_blind_costs``)."""
    import pandas as pd

    import mecsim
    from mecsim.common.errors import MecsimError

    alike = [
        *settings,
        "execution.cost_only=true",
        "clients.count=8",
        'clients.num_samples={dist="choice", values=[40, 90]}',
    ]
    try:
        shared = mecsim.run(copy.deepcopy(TINY), alike, write=False)
        with patched(cls, "client_blind_costs", lambda _: False):
            every = mecsim.run(copy.deepcopy(TINY), alike, write=False)
        pd.testing.assert_frame_equal(every.events, shared.events)
    except (AssertionError, MecsimError) as error:
        return [f"sharing results within classes changes the run: {str(error).splitlines()[0]}"]
    return []


def check_protocol(name: str, kind: str) -> list[Outcome]:
    """Every check of algorithm ``name`` under protocol ``kind``."""
    import mecsim
    from mecsim.algorithms import ALGORITHMS

    cls = ALGORITHMS.get(name)
    settings = overrides(name, kind)
    uploads: list = []
    downlinks: list = []
    mixed: list = []
    asynchronous = kind in ("fedasync", "fedbuff") and cls.broadcast
    watch_mix = mixes(cls, mixed) if asynchronous else nullcontext()
    meters: list = []
    with recorded(cls, "upload", uploads), recorded(cls, "downlink", downlinks), watch_mix:
        with metering(meters):
            serial = mecsim.run(copy.deepcopy(TINY), settings, executor="serial", write=False)
    batched = mecsim.run(copy.deepcopy(TINY), settings, executor="batched", write=False)

    classes = Outcome(kind, "classes")
    if not cls.client_blind_costs or cls.payload_from_training:
        classes.skipped = "runs every job (the algorithm does not declare client_blind_costs)"
    else:
        classes.problems += class_problems(cls, settings)
    mixing = Outcome(kind, "mix")
    if not asynchronous:
        mixing.skipped = (
            "no asynchronous updates"
            if kind not in ("fedasync", "fedbuff")
            else ("per-client downlinks")
        )
    elif not mixed:
        mixing.problems.append("the asynchronous run applied no update")
    else:
        mixing.problems += mix_problems(mixed)
    resumed = Outcome(kind, "resume")
    first = protocols_of(name)[0]
    if kind != first:
        resumed.skipped = f"checked under {first}"
    else:
        resumed.problems += resume_problems(settings)
    return [
        bytes_outcome(kind, serial.events, uploads, downlinks),
        flops_outcome(kind, serial.events, set().union(*(m.unpriced for m in meters))),
        executors_outcome(kind, serial, batched),
        cost_only_outcome(kind, cls, settings, serial.events),
        classes,
        mixing,
        resumed,
    ]


def bytes_outcome(kind: str, events: Any, uploads: list, downlinks: list) -> Outcome:
    """Every upload's and download's bytes are a payload the algorithm returned."""
    sizes = Outcome(kind, "bytes")
    up = events[events["phase"] == "upload"]
    sent = {(r, c, b) for r, c, b in uploads}
    for (job, client), nbytes in up.set_index(["job", "client"])["bytes"].items():
        if (job, client, nbytes) not in sent:
            sizes.problems.append(f"upload of client {client}, job {job}: {nbytes} B sent")
    if kind not in ("fedasync", "fedbuff") and sorted(up["bytes"]) != sorted(
        b for _, _, b in uploads
    ):  # asynchronous runs end with uploads still in flight
        sizes.problems.append("the uploads' bytes are not the payloads the algorithm returned")
    down = set(events.loc[events["phase"] == "download", "bytes"])
    if not down <= {b for _, _, b in downlinks}:
        sizes.problems.append(f"download bytes {sorted(down)} match no downlink payload")
    return sizes


def metering(meters: list):
    """Collect every :class:`~mecsim.learning.cost.StepMeter` a run makes into ``meters``."""
    from mecsim.learning.cost import StepMeter

    def wrap(original):
        def init(self):
            original(self)
            meters.append(self)

        return init

    return patched(StepMeter, "__init__", wrap)


def flops_outcome(kind: str, events: Any, unpriced: set[str]) -> Outcome:
    """Every ``compute:`` row has positive FLOPs; no weight-space op escapes the meter."""
    from mecsim.learning.models.elementwise import DATA_MOVEMENT

    work = Outcome(kind, "flops")
    compute = events[events["phase"].str.startswith("compute:")]
    if compute.empty or not (compute["flops"] > 0).all():
        work.problems.append("a compute row has no FLOPs (or the run computed nothing)")
    if unknown := sorted(unpriced - DATA_MOVEMENT):
        work.problems.append(
            f"steps run {', '.join(unknown)} on weights, which no FLOP rule prices: add a rule "
            "to mecsim/learning/models/elementwise.py, or list it there as data movement"
        )
    return work


def executors_outcome(kind: str, serial: Any, batched: Any) -> Outcome:
    """Serial and batched: the same events table, accuracies within 0.05."""
    import numpy as np
    import pandas as pd

    same = Outcome(kind, "executors")
    try:
        pd.testing.assert_frame_equal(serial.events, batched.events)
    except AssertionError as error:
        same.problems.append(f"serial and batched events differ: {str(error).splitlines()[0]}")
    for column in ("generic_acc", "personal_acc"):
        a, b = serial.rounds[column].to_numpy(), batched.rounds[column].to_numpy()
        if not np.allclose(a, b, atol=0.05, equal_nan=True):
            same.problems.append(f"{column}: serial {a.round(3)}, batched {b.round(3)}")
    return same


def cost_only_outcome(kind: str, cls: type, settings: list[str], events: Any) -> Outcome:
    """A cost-only run has the serial run's events table (or is refused, when what a
    client sends depends on training)."""
    import pandas as pd

    import mecsim
    from mecsim.common.errors import MecsimError

    cost = Outcome(kind, "cost-only")
    if cls.payload_from_training:
        cost.skipped = "refused: its payload depends on training"
        return cost
    try:
        dry = mecsim.run(copy.deepcopy(TINY), [*settings, "execution.cost_only=true"], write=False)
        pd.testing.assert_frame_equal(events, dry.events)
    except (AssertionError, MecsimError) as error:
        cost.problems.append(f"cost-only differs: {str(error).splitlines()[0]}")
    return cost


def check_algorithm(name: str, progress: Callable[[str], None] | None = None) -> list[Outcome]:
    """The conformance suite of algorithm ``name`` under every protocol it declares."""
    outcomes = []
    for kind in protocols_of(name):
        if progress is not None:
            progress(kind)
        outcomes += check_protocol(name, kind)
    return outcomes


def render(name: str, outcomes: list[Outcome]) -> str:
    """A pass/fail table, one row per protocol and check."""
    lines = [f"mecsim check {name}", "", f"{'protocol':<18} {'check':<10} result"]
    for o in outcomes:
        result = f"skipped ({o.skipped})" if o.skipped else "ok" if o.ok else "FAIL"
        lines.append(f"{o.protocol:<18} {o.check:<10} {result}")
        lines += [f"{'':<29}{p}" for p in o.problems]
    failed = sum(not o.ok for o in outcomes)
    verdict = "all passed" if not failed else f"{failed} failed"
    lines += ["", f"{len(outcomes)} checks of {name}: {verdict}"]
    return "\n".join(lines) + "\n"
