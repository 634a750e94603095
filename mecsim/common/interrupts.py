"""A stop a signal asked for, kept until it is raised where it cannot be lost.

The command line's signal handlers raise where the run is, like Ctrl-C. But
Python swallows an exception raised inside a weak-reference callback or a
``__del__`` (it prints "Exception ignored in ..." and goes on), and garbage
collection runs such callbacks at arbitrary moments: a SIGINT landing there
would be lost and the run would go on for hours. So the handler also leaves
the stop here, and the run raises it at the next safe point (the end of each
round) if it is still pending.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

pending: BaseException | None = None
"""The stop a signal asked for and no code has yet seen raised to the top."""


def request(stop: BaseException) -> BaseException:
    """Record ``stop`` (a signal handler raises what this returns)."""
    global pending
    pending = stop
    return stop


def raise_pending() -> None:
    """Raise the recorded stop, if any (called at safe points of a run)."""
    global pending
    stop, pending = pending, None
    if stop is not None:
        raise stop


def clear() -> None:
    """Forget the recorded stop (it reached the top)."""
    global pending
    pending = None


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for a few statements that must not be cut in two
    (creating a file and writing the record that proves it mecsim's): their handlers
    only note a signal meanwhile, and it is raised again, to the real handler, as the
    block ends. (Handlers, not the thread's signal mask: any thread may receive a
    process's signal, and Python runs the handler in the main thread all the same.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda number, _: caught.append(number)) for s in held}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        for number in dict.fromkeys(caught):
            signal.raise_signal(number)
