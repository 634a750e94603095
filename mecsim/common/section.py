"""The base class of every scenario section and settings class.

It lives apart from :mod:`mecsim.config.scenario` so that algorithms and protocols
can declare their settings without importing the scenario (which imports
their registries): dependencies point one way, scenario -> registries.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def types_in(annotation: Any) -> list[Any]:
    """Every type an annotation names, in order, through unions and ``Annotated``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return types_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in types_in(a)]
    return [annotation]


@functools.cache
def _number_not_bool(model: type[BaseModel], name: str) -> bool:
    """Whether field ``name`` of ``model`` takes a number but never true/false."""
    named = set(types_in(model.model_fields[name].annotation))
    return bool(named & {int, float}) and bool not in named and Any not in named


MAX_REPEATS = 100_000
"""The most a repetition count (a key named ``*epochs`` or ``*steps``) may be unless its
field sets its own bound: ``epochs = 1e9`` allocated gigabytes before the first step."""


@functools.cache
def unbounded_repeat(model: type[BaseModel], name: str) -> bool:
    """Whether ``name`` counts repetitions and its field sets no upper bound of its own."""
    field = model.model_fields[name]
    own = any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
              for m in field.metadata)  # fmt: skip
    return name.endswith(("epochs", "steps")) and not own


class Section(BaseModel):
    """Base of every scenario section: unknown keys are errors, defaults are validated,
    a number is never given as true/false (pydantic would read ``true`` as 1), and a
    repetition count is at most :data:`MAX_REPEATS`."""

    model_config = ConfigDict(
        extra="forbid", validate_default=True, allow_inf_nan=False, defer_build=True
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name and _number_not_bool(cls, info.field_name):
            raise ValueError(f"give a number, not {str(value).lower()}")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _bounded_repeats(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, int) and value > MAX_REPEATS and info.field_name:
            if unbounded_repeat(cls, info.field_name):
                raise ValueError(f"{value} repetitions: give at most {MAX_REPEATS:,}")
        return value
