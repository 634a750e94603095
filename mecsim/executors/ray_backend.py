"""The Ray executor: client jobs run in Ray actors, on one machine or a cluster.

The driver keeps the SimPy clock and all decisions; each round's ready jobs
are split into contiguous chunks, one per actor, and each actor runs its
chunk with an inner executor (``batched`` by default). Every actor receives
the shared training context (algorithm, architecture, dataset tensors) once,
when it starts. Since jobs are pure and seeded per (client, round, task),
results equal the serial executor's.

Point mecsim at a cluster with ``execution.ray_address`` (e.g. ``"auto"``
on a cluster node, or ``"ray://head:10001"``); without it a local Ray
instance starts. ``execution.ray_gpus_per_task`` gives each actor a GPU
share; an actor with a GPU trains on it.

Actors are spread over the cluster's nodes (Ray's ``SPREAD`` strategy), and
:meth:`RayExecutor.report` counts the jobs each node ran (``summary.json``'s
``executor_report``). Faults: when an actor dies with its node, its chunk is
resubmitted to a surviving actor (a pure, seeded job gives the same result
the second time, so the tables do not change) and the pool shrinks. When no
actor survives (the head or every worker node is gone), :class:`ExecutorLost`
stops the run; the checkpoint it kept continues it with ``--resume``. Nodes
that join later are not used by a running run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mecsim.common.errors import ConfigError, ExecutorLost, MecsimError
from mecsim.executors.base import ClientJob, JobResult, TrainingContext
from mecsim.learning.state import ModelState

log = logging.getLogger(__name__)

STOPS = "the run stops at its last checkpoint: continue with --resume on a new cluster"
"""What an :class:`ExecutorLost` message ends with."""
MAX_RETRIES = 3
"""Times one chunk of jobs is resubmitted after its actor died before the run stops."""


def to_device(obj: Any, device: torch.device | str) -> Any:
    """Move tensors inside dicts, lists, tuples, ModelStates and jobs/results to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, ModelState):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    if isinstance(obj, (ClientJob, JobResult)):
        return dataclasses.replace(
            obj,
            **{f.name: to_device(getattr(obj, f.name), device) for f in dataclasses.fields(obj)},
        )
    return obj


def context_on(ctx: TrainingContext, device: torch.device | str) -> TrainingContext:
    """``ctx`` with its data tensors and architecture templates on ``device``."""
    for function in ctx.functions.values():
        function.model.to(device)
    return dataclasses.replace(ctx, data=to_device(ctx.data, device))


class _Worker:
    """A Ray actor holding the training context on its device."""

    def __init__(self, ctx: TrainingContext, inner: str, max_clients: int | None) -> None:
        import ray

        from mecsim.executors import make_executor

        self.node = ray.get_runtime_context().get_node_id()
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        options = {"max_clients": max_clients} if inner == "batched" else {}
        self.executor = make_executor(inner, context_on(ctx, self.device), **options)

    def run(self, jobs: list[ClientJob]) -> tuple[str, list[JobResult]]:
        """The chunk's results, with the id of the Ray node that ran them."""
        results = self.executor.run(to_device(jobs, self.device))
        return self.node, to_device(results, "cpu")


@dataclass
class _Chunk:
    """One actor's share of a round's jobs, and how often it was resubmitted."""

    jobs: list[ClientJob]
    worker: Any
    retries: int = 0
    results: list[JobResult] | None = None


HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""HTTP/2's client preface and an empty SETTINGS frame: a Ray head (GCS or Ray client
server, both gRPC) answers with a SETTINGS frame of its own."""


def check_address(address: str | None, field: str, timeout_s: float = 5.0) -> None:
    """Refuse, in one line and within about ``timeout_s``, a Ray address nothing listens
    at or whose listener is not Ray (``ray.init`` itself retries for minutes). ``None``
    and ``"auto"`` are left to Ray."""
    if address is None or address == "auto":
        return
    import socket

    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(
            field, f"{address!r}: give HOST:PORT, ray://HOST:PORT or auto (e.g. 10.0.0.5:6379)"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.settimeout(min(timeout_s, 3.0))  # a Ray head answers in milliseconds
            answer = _handshake(sock)
    except OSError as error:
        raise ConfigError(
            field,
            f"no Ray cluster answers at {address} ({error.strerror or error}); start one "
            "with `ray start --head` or give its address",
        ) from None
    if len(answer) < 9 or answer[3] != 4:  # no HTTP/2 SETTINGS frame: not gRPC, not Ray
        raise ConfigError(
            field,
            f"{address} accepts connections but is not a Ray cluster (no gRPC answer); give "
            "the head's address (HOST:6379, or ray://HOST:10001 for Ray client)",
        )


def _recorded_file() -> str:
    """Where Ray records the cluster this machine runs (``ray_current_cluster``)."""
    linux_tmp = os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None
    base = os.environ.get("RAY_TMPDIR") or linux_tmp or "/tmp"  # as Ray chooses it
    return os.path.join(base, "ray", "ray_current_cluster")


def check_recorded_cluster(field: str) -> None:
    """Refuse, in one line, Ray's record of a local cluster that answers nothing (a
    crashed one's): ``ray.init`` would retry it for minutes, or fail with a traceback."""
    try:
        with open(_recorded_file()) as record:
            recorded = record.read().strip()
    except OSError:
        return
    if not recorded:
        return
    try:
        check_address(recorded, field)
    except ConfigError:
        raise ConfigError(
            field,
            f"Ray records a cluster on this machine at {recorded} ({_recorded_file()}) that "
            "answers nothing: remove that file if no cluster runs, or give an address",
        ) from None


def _handshake(sock: Any) -> bytes:
    """The first 9 bytes the listener on ``sock`` answers HTTP/2's preface with (fewer:
    it closed or kept silent until the socket's timeout)."""

    sock.sendall(HTTP2_HELLO)
    answer = b""
    try:
        while len(answer) < 9 and (chunk := sock.recv(9 - len(answer))):
            answer += chunk
    except (TimeoutError, ConnectionError):
        pass
    return answer


def connect(
    address: str | None,
    field: str,
    requirer: str,
    num_cpus: int | None = None,
    resources: dict[str, float] | None = None,
    resources_field: str = "",
) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` (None: ``RAY_ADDRESS``, a
    cluster on this machine, else a new local instance of ``num_cpus`` CPUs); an existing
    connection is kept. A missing Ray is one line naming ``requirer`` (the setting that
    asked for Ray), a cluster that does not answer one line naming ``field`` (or
    ``RAY_ADDRESS``, where that named it), ``resources`` a task needs that the cluster
    lacks one line naming ``resources_field`` (a connection made here is then closed)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            requirer, "needs Ray: pip install 'mecsim[ray]' (or pip install ray)"
        ) from None
    if ray.is_initialized():
        check_resources(ray, resources or {}, resources_field)
        return ray
    if address is None and os.environ.get("RAY_ADDRESS"):
        check_address(os.environ["RAY_ADDRESS"], "RAY_ADDRESS")
    elif address is None:
        check_recorded_cluster(field)
    check_address(address, field)
    try:
        ray.init(
            address=address,
            num_cpus=num_cpus if address is None else None,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except ConnectionError as error:
        raise ConfigError(
            field,
            f"no Ray cluster at {address!r} ({error}); start one with `ray start --head` "
            "or give its address",
        ) from None
    except ValueError as error:  # a cluster runs here, and num_cpus asked for a new one
        if address is not None or "existing cluster" not in str(error):
            raise
        raise ConfigError(
            field,
            f"a Ray cluster runs on this machine ({_recorded_file()}), which mecsim would join "
            "without setting its CPUs: give its address, or stop it (`ray stop`)",
        ) from None
    try:
        check_resources(ray, resources or {}, resources_field)
    except ConfigError:
        ray.shutdown()
        raise
    return ray


RAY_NAMES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
"""Task option -> the name of the resource in ``ray.cluster_resources()``."""


def check_resources(ray: Any, wanted: dict[str, float], field: str) -> None:
    """Refuse a task that asks for more of a resource than the whole cluster has: Ray
    would leave it pending for ever. ``wanted`` maps task options (``num_gpus``) or
    custom resource names to amounts."""
    have = ray.cluster_resources()
    for key, amount in wanted.items():
        name = RAY_NAMES.get(key, key)
        if amount > 0 and have.get(name, 0.0) < amount:
            raise ConfigError(
                field,
                f"each task asks for {key}={amount:g} but the cluster has "
                f"{have.get(name, 0.0):g} {name} in all: ask for less or add nodes with it",
            )


def job_error(error: Exception) -> BaseException:
    """What to raise for a Ray task that failed in its own code: the mecsim error it
    raised (one line for the user), else Ray's error with the remote traceback."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, MecsimError) else error


class RayExecutor:
    """Runs each round's jobs across Ray actors (see the module docstring)."""

    def __init__(
        self,
        ctx: TrainingContext,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        gpus_per_task: float = 0.0,
        tasks: int | None = None,
        inner: str = "batched",
        max_clients: int | None = None,
        max_retries: int = MAX_RETRIES,
    ) -> None:
        ray = self.ray = connect(
            address,
            "execution.ray_address",
            "execution.executor",
            num_cpus,
            {"num_gpus": gpus_per_task},
            "execution.ray_gpus_per_task",
        )
        count = tasks or max(1, int(ray.available_resources().get("CPU", 1)))
        self.device = ctx.device
        self.max_retries = max_retries
        self.jobs_per_node: Counter[str] = Counter()
        self.retried_jobs = 0
        self.lost_workers = 0
        context = ray.put(context_on(ctx, "cpu"))  # shipped once, shared by every actor
        actor = ray.remote(num_cpus=1, num_gpus=gpus_per_task, max_restarts=0)(_Worker)
        spread = actor.options(scheduling_strategy="SPREAD")  # one per node before doubling up
        self.workers = [spread.remote(context, inner, max_clients) for _ in range(count)]
        context_on(ctx, self.device)

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        """The jobs' results in order; a chunk whose actor died (its node removed or
        crashed) is resubmitted to a surviving actor: jobs are pure and seeded, so the
        retry's results are the ones the lost actor would have returned."""
        if not jobs:
            return []
        n = min(len(self.workers), len(jobs))
        bounds = [round(i * len(jobs) / n) for i in range(n + 1)]
        chunks = [
            _Chunk(to_device(list(jobs[a:b]), "cpu"), worker)
            for a, b, worker in zip(bounds, bounds[1:], self.workers, strict=False)
        ]
        pending = {chunk.worker.run.remote(chunk.jobs): chunk for chunk in chunks}
        while pending:
            try:
                ready, _ = self.ray.wait(list(pending), num_returns=1)
            except Exception as error:  # the driver lost its connection: the head is gone
                raise ExecutorLost(
                    f"the Ray cluster is unreachable ({type(error).__name__}); {STOPS}"
                ) from None
            chunk = pending.pop(ready[0])
            try:
                node, chunk.results = self.ray.get(ready[0])
            except self.ray.exceptions.RayTaskError as error:  # the job itself failed
                raise job_error(error) from None
            except Exception as error:  # the actor or its node is gone
                self._lose(chunk, error)
                pending[chunk.worker.run.remote(chunk.jobs)] = chunk
                continue
            self.jobs_per_node[node] += len(chunk.jobs)
        return [to_device(r, self.device) for chunk in chunks for r in chunk.results or ()]

    def _lose(self, chunk: _Chunk, error: Exception) -> None:
        """Drop ``chunk``'s dead actor and hand the chunk to a survivor."""
        if chunk.worker in self.workers:
            self.workers.remove(chunk.worker)
            self.lost_workers += 1
        chunk.retries += 1
        if not self.workers or chunk.retries > self.max_retries:
            raise ExecutorLost(
                f"the Ray cluster lost every worker ({type(error).__name__}: "
                f"{str(error).splitlines()[0]}); {STOPS}"
            )
        self.retried_jobs += len(chunk.jobs)
        chunk.worker = self.workers[chunk.retries % len(self.workers)]
        log.warning(
            "a Ray worker was lost (%s); %d jobs re-run on another node",
            type(error).__name__,
            len(chunk.jobs),
        )

    def report(self) -> dict[str, Any]:
        """What ran where: client jobs per Ray node id, jobs re-run after a lost worker."""
        return {
            "jobs_per_node": dict(sorted(self.jobs_per_node.items())),
            "retried_jobs": self.retried_jobs,
            "lost_workers": self.lost_workers,
        }

    def close(self) -> None:
        """Stop the actors (the Ray instance stays up for reuse)."""
        for worker in self.workers:
            self.ray.kill(worker)
        self.workers = []
