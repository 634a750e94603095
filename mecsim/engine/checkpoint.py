"""Checkpoint and resume by replay.

SimPy processes are generators and cannot be saved, so a checkpoint does not
freeze the event loop. It saves, at the end of a round (a server update for
asynchronous protocols), what the event loop cannot recompute cheaply:

* the server and client states;
* every tensor-holding object a process still refers to (downlink payloads
  and job results, numbered in creation order by a :class:`Ledger`), e.g.
  the jobs of asynchronous clients still in flight or FedBuff's buffer;
* the FLOPs and steps of every executor call so far, the round rows and the
  last evaluation.

``--resume`` rebuilds the run and replays its events from the start with no
training (the cost-only executor, with the logged FLOPs) and no evaluation:
the event flow depends only on shapes, FLOPs and the seeded random streams,
so it is the original's. At the checkpoint's round the saved states and
objects are swapped in (payload dicts in place, so every reference sees
them) and the run continues with real training. Its tables equal an
uninterrupted run's except the wall-clock columns of the resumed round.

A checkpoint cannot run code: it is a header line (format, the scenario's
digest, the SHA-256 and length of the rest) followed by a ``torch.save``
payload that is read only after its hash matches, with
``torch.load(weights_only=True)`` allowing tensors, containers and the four
plain data classes mecsim writes (:data:`SAFE_CLASSES`), then checked against
a schema. A corrupted or edited file, or a pickle that would build anything
else, is refused with one line before anything in it is used. The hash is
no signature: whoever hands you a checkpoint can make its numbers up, but
not make mecsim run their code. With ``MECSIM_CHECKPOINT_KEY`` set, the header
also carries an HMAC-SHA256 of the payload under that key, and a resume with the
key refuses a checkpoint whose HMAC is missing or does not match (for runs
resumed from shared storage).
"""

from __future__ import annotations

import collections
import gc
import hashlib
import hmac
import io
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mecsim.common.errors import ConfigError, MecsimError
from mecsim.common.file_keys import absolute_file_paths
from mecsim.engine.evaluation import Evaluation
from mecsim.executors import ClientJob, Executor, JobResult
from mecsim.learning.state import ModelState

if TYPE_CHECKING:
    from mecsim.engine.simulation import Simulation

log = logging.getLogger(__name__)

FORMAT = 4
MAGIC = b"mecsim-checkpoint\n"
SAFE_CLASSES = (collections.OrderedDict, Evaluation, JobResult, ModelState)
"""Every class a checkpoint's payload may build (besides tensors and built-in containers)."""
SCHEMA: dict[str, type | tuple[type, ...]] = {
    "rounds_done": int,
    "sim_time": (int, float),
    "events": int,
    "executor_calls": int,
    "log": list,
    "ledger_count": int,
    "live": dict,
    "server_state": object,
    "client_states": list,
    "last_evaluation": (Evaluation, type(None)),
    "rounds": list,
    "state_peak_bytes": (tuple, list),
}
"""The payload's keys and their types (checked after loading, before any is used)."""


class Ledger:
    """Tensor-holding objects that processes may keep across events, numbered in order.

    Only a run that saves checkpoints needs them: with ``keep=False`` objects
    are numbered but not held (a 100,000-client round's results and uploads,
    16 MB of references, until the round's end).
    """

    def __init__(self, keep: bool = True) -> None:
        self.objects: dict[int, Any] = {}
        self.count = 0
        self.keep = keep

    def add(self, obj: Any) -> Any:
        if obj is not None:
            if self.keep:
                self.objects[self.count] = obj
            self.count += 1
        return obj

    def add_result(self, result: JobResult) -> JobResult:
        """Number a job result and its upload (which may outlive it: buffers, carried uploads)."""
        self.add(result)
        if isinstance(result.upload, dict):
            self.add(result.upload)
        return result

    def prune(self) -> None:
        """Forget objects nothing else refers to (a dead probe calibrates the count)."""
        self.objects[-1] = {}
        counts = {k: sys.getrefcount(o) for k, o in self.objects.items()}
        dead = counts.pop(-1)
        self.objects = {k: self.objects[k] for k, c in counts.items() if c > dead}

    def live(self) -> dict[int, Any]:
        gc.collect()
        self.prune()
        return dict(self.objects)


def swap_in(fake: Any, real: Any) -> None:
    """Give the replayed object ``fake`` the saved contents of ``real``, in place."""
    if isinstance(fake, dict):
        fake.clear()
        fake.update(real)
    elif isinstance(fake, JobResult):
        fake.state, fake.task_flops, fake.task_steps = real.state, real.task_flops, real.task_steps
        if isinstance(fake.upload, dict) and isinstance(real.upload, dict):
            swap_in(fake.upload, real.upload)
        else:
            fake.upload = real.upload
    else:
        raise TypeError(f"cannot swap a {type(fake).__name__}")


class ReplayingExecutor:
    """Runs jobs on the real executor and logs their FLOPs, steps and reports per call.

    While replaying a checkpoint's past (:meth:`replay`), jobs run on the
    cost-only executor instead, given the logged FLOPs, steps and reports (the
    losses and update norms a scheduler ranked by). A
    cost-only run needs no log (its executor is already the cost-only one).
    """

    def __init__(self, real: Executor, record: bool = True) -> None:
        self.real = real
        self.record = record
        self.log: list[list[tuple[dict, dict, dict]]] = []
        self.dry: Executor | None = None
        self.calls = 0

    def replay(self, log_: list[list[tuple[dict, dict, dict]]], dry: Executor) -> None:
        """Replay the calls of ``log_`` on ``dry`` before running real jobs again."""
        self.log = list(log_)
        self.dry = dry if self.record else None

    def stop_replay(self) -> None:
        self.dry = None

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        if self.dry is not None:
            if self.calls >= len(self.log):
                raise CheckpointMismatch("more executor calls than logged")
            results = self.dry.run(jobs)
            logged = self.log[self.calls]
            if len(logged) != len(results):
                raise CheckpointMismatch("executor call sizes")
            for result, (flops, steps, reports) in zip(results, logged, strict=True):
                result.task_flops, result.task_steps = dict(flops), dict(steps)
                result.reports = dict(reports)
        else:
            results = self.real.run(jobs)
            if self.record:  # the reports are filled in once the simulation has them
                self.log.append(
                    [(dict(r.task_flops), dict(r.task_steps), r.reports) for r in results]
                )
        self.calls += 1
        return results

    def close(self) -> None:
        close = getattr(self.real, "close", None)
        if close is not None:
            close()


class CheckpointMismatch(MecsimError):
    """The replay did not retrace the checkpointed run (a bug, or edited inputs)."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"--resume: the replay diverged from the checkpoint ({what}); the scenario's "
            "inputs (data files, traces) changed since it was written: run without --resume"
        )


def scenario_digest(resolved: dict[str, Any]) -> str:
    """Hash of a resolved scenario without the keys that do not change results."""
    data = {k: v for k, v in resolved.items() if k not in ("output", "versions", "execution")}
    data = absolute_file_paths(data)  # the same file spelled another way: the same scenario
    execution = dict(resolved.get("execution", {}))
    for key in (
        "executor",
        "max_batch_clients",
        "ray_address",
        "ray_num_cpus",
        "ray_tasks",
        "ray_inner",
        "threads",
    ):
        execution.pop(key, None)
    data["execution"] = execution
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def checkpoint_path(run_dir: Path) -> Path:
    """Where the checkpoint of the run writing ``run_dir`` lives (next to it, hidden)."""
    return run_dir.parent / f".{run_dir.name}.checkpoint.pt"


class Checkpointer:
    """Saves checkpoints at round ends; on resume, swaps the saved state in at its round."""

    def __init__(
        self,
        path: Path,
        digest: str,
        every_rounds: int | None,
        every_minutes: float,
        resume: dict[str, Any] | None = None,
    ) -> None:
        self.path = path
        self.digest = digest
        self.every_rounds = every_rounds
        self.every_s = every_minutes * 60
        self.resume = resume
        self.disabled = False
        """Set once a checkpoint could not be written: the run goes on without them."""
        self.last_save = time.monotonic()
        self.saved_rounds = 0 if resume is None else resume["rounds_done"]

    @property
    def replaying(self) -> bool:
        return self.resume is not None

    @property
    def resume_round(self) -> int | None:
        """Rounds done when the checkpoint being resumed was saved (None: not resuming)."""
        return None if self.resume is None else self.resume["rounds_done"]

    def after_round(self, sim: Simulation, rounds_done: int) -> None:
        """Called by the simulation after each round row (``rounds_done`` rows so far)."""
        if self.resume is not None:
            if rounds_done == self.resume["rounds_done"]:
                self._swap(sim)
            return
        due_rounds = self.every_rounds is not None and rounds_done % self.every_rounds == 0
        due_time = self.every_s > 0 and time.monotonic() - self.last_save >= self.every_s
        if (due_rounds or due_time) and rounds_done < sim.protocol.rounds:
            self.save(sim, rounds_done)

    def save(self, sim: Simulation, rounds_done: int) -> None:
        executor = sim.executor
        assert isinstance(executor, ReplayingExecutor)
        state = {  # format and scenario digest go in the header, checked before loading
            "rounds_done": rounds_done,
            "sim_time": sim.env.now,
            "events": len(sim.recorder),
            "executor_calls": executor.calls,
            "log": executor.log,
            "ledger_count": sim.ledger.count,
            "live": sim.ledger.live(),
            "server_state": sim.server_state,
            "client_states": sim.client_states,
            "last_evaluation": sim.last_evaluation,
            "rounds": sim.recorder._rounds,
            "state_peak_bytes": (sim.server_state_peak_bytes, sim.client_state_peak_bytes),
        }
        if self.disabled:
            return
        payload = _pickle_safely(state)
        if payload is None:
            self.disabled = True
            return
        header = {
            "format": FORMAT,
            "digest": self.digest,
            "sha256": hashlib.sha256(payload).hexdigest(),
            "bytes": len(payload),
        }
        if (key := _signing_key()) is not None:
            header["hmac"] = hmac.new(key, payload, hashlib.sha256).hexdigest()
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                f.write(MAGIC + json.dumps(header).encode() + b"\n")
                f.write(payload)
            os.replace(tmp, self.path)
        except OSError as error:  # disk full, quota, read-only: go on without checkpoints
            tmp.unlink(missing_ok=True)
            self.disabled = True
            log.warning(
                "could not write the checkpoint %s (%s); the run goes on without checkpoints",
                self.path,
                error.strerror or error,
            )
            return
        except BaseException:  # interrupted: the previous checkpoint stays
            tmp.unlink(missing_ok=True)
            raise
        self.last_save = time.monotonic()
        self.saved_rounds = rounds_done
        log.debug("checkpoint after %d rounds -> %s", rounds_done, self.path)

    def _swap(self, sim: Simulation) -> None:
        saved = self.resume
        assert saved is not None
        executor = sim.executor
        assert isinstance(executor, ReplayingExecutor)
        if (
            executor.calls != saved["executor_calls"]
            or len(sim.recorder) != saved["events"]
            or sim.ledger.count != saved["ledger_count"]
            or sim.env.now != saved["sim_time"]
        ):
            raise CheckpointMismatch("event count, clock or executor calls")
        for key, real in saved["live"].items():
            fake = sim.ledger.objects.get(key)
            if fake is None:
                raise CheckpointMismatch(f"object {key} is gone")
            swap_in(fake, real)
        sim.server_state = saved["server_state"]
        sim.client_states = list(saved["client_states"])
        server_peak, client_peaks = saved["state_peak_bytes"]
        sim.server_state_peak_bytes, sim.client_state_peak_bytes = server_peak, list(client_peaks)
        sim.last_evaluation = saved["last_evaluation"]
        sim.recorder._rounds = list(saved["rounds"])
        sim.evaluator = sim.evaluator.real
        executor.stop_replay()
        self.resume = None
        self.saved_rounds = saved["rounds_done"]
        sim.restart_wall_clock()
        log.info("resumed after round %d (t = %.6g s)", saved["rounds_done"], sim.env.now)


class ReplayEvaluator:
    """No evaluation while replaying (the saved round rows replace the replayed ones)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def evaluate(self, *args: Any) -> Evaluation:
        nan = float("nan")
        return Evaluation(nan, nan, nan, ())


def _pickle_safely(state: dict[str, Any]) -> bytes | None:
    """``state`` as a ``torch.save`` payload, or None (with a warning) if it holds a class
    a safe load would refuse (a plug-in's own state class): such a run is not
    checkpointed rather than checkpointed into a file that cannot be resumed."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    allowed = {f"{c.__module__}.{c.__qualname__}" for c in SAFE_CLASSES}
    unsafe = [
        g for g in torch.serialization.get_unsafe_globals_in_checkpoint(buffer) if g not in allowed
    ]
    if unsafe:
        log.warning(
            "the run's state holds %s, which a safe checkpoint cannot carry (only tensors, "
            "built-in containers and %s); the run goes on without checkpoints",
            unsafe[0],
            ", ".join(sorted(allowed)),
        )
        return None
    return buffer.getvalue()


def _refuse(path: Path, why: str) -> ConfigError:
    return ConfigError("--resume", f"the checkpoint {path} {why}; run without --resume")


def load_checkpoint(path: Path, digest: str) -> dict[str, Any]:
    """Read a checkpoint written for this scenario (or fail with one clear line); nothing
    in the file is unpickled before its header and content hash check out."""
    if not path.is_file():
        raise ConfigError(
            "--resume", f"no checkpoint at {path}: nothing to resume; run without --resume"
        )
    try:
        with open(path, "rb") as f:
            header, expected_len = _read_header(path, f, digest)
            if os.fstat(f.fileno()).st_size - f.tell() != expected_len:  # before reading it
                raise _refuse(path, "is corrupted or was edited: its length does not match")
            payload = f.read()
    except OSError as error:
        raise _refuse(path, f"cannot be read ({error.strerror or error})") from None
    if len(payload) != expected_len or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise _refuse(path, "is corrupted or was edited: its content hash does not match")
    if (key := _signing_key()) is not None:
        signed = hmac.new(key, payload, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(str(header.get("hmac", "")), signed):
            raise _refuse(path, "is not signed with MECSIM_CHECKPOINT_KEY's key")
    try:
        with torch.serialization.safe_globals(list(SAFE_CLASSES)):
            saved = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as error:  # a pickle that builds something else: refused, not run
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise _refuse(path, f"holds objects mecsim does not write ({first[:200]})") from None
    _check_schema(path, saved)
    return saved


def _signing_key() -> bytes | None:
    """The key of ``MECSIM_CHECKPOINT_KEY`` (None: checkpoints are hashed, not signed)."""
    key = os.environ.get("MECSIM_CHECKPOINT_KEY")
    return key.encode() if key else None


def _read_header(path: Path, f: Any, digest: str) -> tuple[dict[str, Any], int]:
    """The header after the magic line, checked (format, scenario); its payload length."""
    if f.read(len(MAGIC)) != MAGIC:
        raise _refuse(path, "is not a mecsim checkpoint of this version")
    try:
        header = json.loads(f.readline(4096))
        known = header["format"] == FORMAT
        header["sha256"], expected_len = str(header["sha256"]), int(header["bytes"])
        written_for = header["digest"]
    except (ValueError, TypeError, KeyError):
        raise _refuse(path, "has a damaged header") from None
    if not known:
        raise _refuse(path, f"is of format {header['format']!r}, not {FORMAT}")
    if written_for != digest:
        raise _refuse(
            path, "was written for a different scenario (restore that scenario to resume it)"
        )
    return header, expected_len


def _check_schema(path: Path, saved: Any) -> None:
    """Refuse a payload whose keys or types are not those :meth:`Checkpointer.save` writes."""
    if not isinstance(saved, dict):
        raise _refuse(path, "does not hold a mapping")
    for key, kind in SCHEMA.items():
        if key not in saved:
            raise _refuse(path, f"lacks {key!r}")
        value = saved[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _refuse(path, f"holds a {type(value).__name__} as {key!r}")
    if saved["rounds_done"] < 1 or len(saved["rounds"]) != saved["rounds_done"]:
        raise _refuse(path, "has inconsistent round counts")
    if len(saved["state_peak_bytes"]) != 2:
        raise _refuse(path, "has a damaged 'state_peak_bytes'")
