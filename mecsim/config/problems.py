"""Problems found in a scenario: each with the dotted path of its key, and the
pydantic errors they come from turned into plain sentences (an unknown key gets the
nearest known one)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from mecsim.common.errors import MecsimError


@dataclass(frozen=True)
class Problem:
    """One validation problem: dotted path of the key and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ScenarioError(MecsimError):
    """A scenario has one or more problems."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid scenario ({len(problems)} problem(s)):\n{lines}")


def known_keys(model: type[BaseModel], parents: Sequence[str]) -> list[str]:
    """The keys of the table at ``parents`` inside ``model`` (empty if not a table)."""
    for part in parents:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def unknown_key_message(key: str, known: Sequence[str]) -> str:
    """'unknown key' with the closest known key, or the known keys when none is close."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    if known:
        return f"unknown key; known keys here: {', '.join(known)}"
    return "unknown key; remove it or check its spelling"


def problems_from(
    error: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> list[Problem]:
    """Pydantic's errors as problems: dotted paths under ``prefix``, plain messages, the
    nearest known key for an unknown one."""
    problems = []
    for item in error.errors():
        # Drop pydantic's union-branch tags (e.g. 'float', 'uniform') from the path.
        loc = [str(p) for p in item["loc"] if not _is_union_tag(p)]
        path = ".".join(([prefix] if prefix else []) + loc) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            known = known_keys(model, loc[:-1]) if model is not None and loc else []
            message = unknown_key_message(loc[-1] if loc else "", known)
        elif item["type"] == "literal_error":
            message = f"{message} (got {item['input']!r})"
        problems.append(Problem(path, message))
    return problems


_UNION_TAGS = {
    "constant",
    "distribution",
    "uniform",
    "normal",
    "lognormal",
    "choice",
    "float",
    "str",
}


def _is_union_tag(part: Any) -> bool:
    """Pydantic adds union-branch names to error paths; they are not scenario keys."""
    return isinstance(part, str) and (part in _UNION_TAGS or part.startswith("function-"))
