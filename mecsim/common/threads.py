"""How many threads torch's CPU kernels use: ``execution.threads``.

torch starts as many threads as the machine has cores. On a shared machine
that oversubscribes the CPUs: a thread that is descheduled stalls the others
at every parallel region, and the quickstart took 10.1 s with two threads
beside one busy process on 2 cores against 4.4 s with one (idle: 4.3 s
against 5.0 s; ``python benchmarks/bench_threads.py``). ``auto`` therefore
takes the CPUs this process may use (its affinity), divided among the
workers of a parallel sweep, and no more than the CPUs found idle in a short
sample of ``/proc/stat`` at the start (at least one).

The count changes the rounding of training's float reductions, so accuracies
of runs with different counts may differ in the last digits; simulated
times, bytes and the events table never do. Set a number for bit-identical
accuracies across machines and loads; ``summary.json`` records the count. The event
medium's parallel loops (numba) take the same count; their rows are independent, so
their results do not depend on it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable

SAMPLE_S = 0.05
"""How long the idle CPUs are sampled at the start of a run."""
CACHE_S = 10.0
"""A sample is reused by runs that start within this many seconds (tests, sweeps)."""
workers = 1
"""Runs this process's sweep executes at once (set in each ``compare -j`` worker)."""
_cache: tuple[float, float] | None = None


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read_stat() -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields[:8])


def idle_cpus(
    read: Callable[[], tuple[int, int] | None] = _read_stat, sample_s: float = SAMPLE_S
) -> float | None:
    """CPUs idle over a short sample (this process sleeps meanwhile), or None if unknown."""
    global _cache
    now = time.monotonic()
    if read is _read_stat and _cache is not None and now - _cache[0] < CACHE_S:
        return _cache[1]
    first = read()
    time.sleep(sample_s)
    second = read()
    if first is None or second is None or second[1] <= first[1]:
        return None
    idle = (second[0] - first[0]) / (second[1] - first[1]) * (os.cpu_count() or 1)
    if read is _read_stat:
        _cache = (now, idle)
    return idle


def choose_threads(setting: int | str, idle: float | None = None) -> int:
    """The thread count of ``execution.threads`` (a number, or ``auto``; see the module
    docstring). ``idle`` overrides the sample (tests)."""
    if isinstance(setting, int):
        return setting
    share = max(1, usable_cpus() // max(workers, 1))
    idle = idle_cpus() if idle is None else idle
    if idle is not None:
        share = min(share, max(1, int(idle + 0.5)))
    return share


def apply_threads(setting: int | str) -> int:
    """Set torch's CPU thread count from ``execution.threads``; return it."""
    import torch

    threads = choose_threads(setting)
    if isinstance(setting, int) and threads > usable_cpus():
        logging.getLogger("mecsim").warning(
            "warning: execution.threads = %d is more than the %d CPUs this process may use: "
            "threads wait for each other at every step (slower, same results); 'auto' "
            "takes what is free",
            threads,
            usable_cpus(),
        )
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    _numba_threads(threads)
    return threads


def _numba_threads(threads: int) -> None:
    """The same count for the event medium's parallel loops (numba), without importing
    numba where the run does not: read when it is imported, else set (this thread's;
    at most the count numba started with)."""
    numba = sys.modules.get("numba")
    if numba is None:
        os.environ["NUMBA_NUM_THREADS"] = str(threads)
    else:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
