"""Exceptions raised by mecsim; each carries the offending field and a fix."""

from __future__ import annotations


class MecsimError(Exception):
    """Base class: a user-facing error the CLI prints as one clear message.

    Its ``args`` are its constructor's arguments, whatever text a subclass makes of them,
    so ``type(error)(*error.args)`` rebuilds it: SimPy copies an error that way when a
    process waits for one that failed (a protocol's sub-process), and pickling does too.
    """

    def __new__(cls, *args: object, **kwargs: object) -> MecsimError:
        error = super().__new__(cls, *args)
        error._arguments = args
        return error

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message_text = message
        self.args = self._arguments

    def __str__(self) -> str:
        return self.message_text


class ConfigError(MecsimError):
    """A scenario value is invalid.

    Args:
        field: dotted path of the offending key, e.g. ``clients.bandwidth_mhz.low``.
        message: what is wrong and how to fix it.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class UnknownNameError(ConfigError):
    """A name (algorithm, dataset, model, ...) is not in its registry."""

    def __init__(self, field: str, kind: str, name: str, allowed: list[str]) -> None:
        self.allowed = allowed
        super().__init__(field, f"unknown {kind} {name!r}; allowed: {', '.join(sorted(allowed))}")


class DatasetNotFoundError(MecsimError):
    """A dataset's files are missing and downloading is off or impossible."""


class ExecutorLost(MecsimError):
    """Every Ray worker is gone (the cluster, or its head, died): the run stops, and its
    last checkpoint (``output.checkpoint_every``) continues it with ``--resume``."""
