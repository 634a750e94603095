"""``mecsim describe``: every setting of an algorithm, a protocol or a scenario section.

Read from the pydantic models themselves (type, default, allowed range,
description), so the listing is never out of date.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from mecsim.commands.parser import DESCRIBABLE
from mecsim.common.errors import ConfigError
from mecsim.common.section import MAX_REPEATS, Section, types_in, unbounded_repeat

NOT_SECTIONS = ("name", "seed", "algorithm", "protocol", "scheduling", "versions")
"""Top-level scenario keys that are no section table of their own (algorithm and
protocol tables are described per algorithm and per protocol)."""
KINDS = DESCRIBABLE
SETTINGS_KINDS = ("algorithm", "protocol", "scheduler", "section")
TABLES = {"algorithm": "algorithm", "protocol": "protocol", "scheduler": "scheduling"}
"""The scenario table a chosen-by-name kind's keys live under."""
"""Kinds whose entries are pydantic settings tables; the others are registered names."""
RELATED_KEYS = {
    "model": ("model", ("name", "assign", "choices")),
    "dataset": ("data", ("dataset", "root", "download", "public_dataset", "public_size")),
    "fading": ("network", ("fading", "rician_k", "shadowing_sigma_db", "coherence_ms")),
    "partition": (
        "data",
        ("partition", "alpha", "classes_per_client", "quantity_skew", "min_samples"),
    ),
}
"""For a registered name: the scenario section and keys that choose and tune it."""


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    return re.sub(r" at 0x[0-9a-f]+", "", str(annotation).replace("typing.", ""))


def _range(field: FieldInfo, capped: bool = False) -> str:
    """The field's bounds; ``capped``: a repetition count at most MAX_REPEATS."""
    bounds = []
    for item in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(
                    f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}"
                )
    return ", ".join([*bounds, *([f"<= {MAX_REPEATS}"] if capped else [])])


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):  # a distribution: its inline table
        items = value.model_dump(mode="json", exclude_none=True).items()
        return "{" + ", ".join(f"{k} = {v!r}" for k, v in items) + "}"
    return repr(value)


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings table a field holds, or a list of (``[[network.cells]]``); None for a
    value or a distribution."""
    for candidate in types_in(annotation):
        if typing.get_origin(candidate) is list:
            candidate = typing.get_args(candidate)[0]
        if (
            isinstance(candidate, type)
            and issubclass(candidate, BaseModel)
            and candidate.__module__ != "mecsim.common.distributions"
        ):
            return candidate
    return None


def section_models() -> dict[str, type[BaseModel]]:
    """Every scenario section table by its dotted path (``network.uplink`` too)."""
    from mecsim.config.scenario import Scenario

    found: dict[str, type[BaseModel]] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            table = _section_model(field.annotation)
            if table is None or (not prefix and name in NOT_SECTIONS):
                continue
            path = f"{prefix}{name}"
            found[path] = table
            walk(table, f"{path}.")

    walk(Scenario, "")
    return found


def _is_array(path: str) -> bool:
    """Whether section ``path`` is an array of tables (``[[network.cells]]``)."""
    from mecsim.config.scenario import Scenario

    model: type[BaseModel] = Scenario
    *parents, last = path.split(".")
    for part in parents:
        model = _section_model(model.model_fields[part].annotation)  # type: ignore[assignment]
    annotation = model.model_fields[last].annotation
    return any(typing.get_origin(t) is list for t in types_in(annotation))


def settings_rows(model: type[BaseModel], skip: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """One row per key (but ``skip`` and nested tables, described as their own sections):
    name, type, default, range, description."""
    return [
        {
            "key": name,
            "type": _type_name(field.annotation),
            "default": _default(field),
            "range": _range(field, issubclass(model, Section) and unbounded_repeat(model, name)),
            "description": field.description or "",
        }
        for name, field in model.model_fields.items()
        if name not in skip and _section_model(field.annotation) is None
    ]


def settings_of(kind: str, name: str) -> tuple[type[BaseModel], str]:
    """The settings model of ``kind`` ``name`` and its one-line description."""
    if kind == "algorithm":
        from mecsim.algorithms import ALGORITHMS

        if name not in ALGORITHMS:
            raise ConfigError("algorithm", _unknown(name, ALGORITHMS.names()))
        return ALGORITHMS.get(name).Settings, ALGORITHMS.describe()[name]
    if kind == "protocol":
        from mecsim.protocols import PROTOCOLS
        from mecsim.protocols.registry import protocol_settings

        if name not in PROTOCOLS:
            raise ConfigError("protocol", _unknown(name, PROTOCOLS.names()))
        return protocol_settings(name), PROTOCOLS.describe()[name]
    if kind == "scheduler":
        from mecsim.policies.scheduling import SCHEDULERS

        if name not in SCHEDULERS:
            raise ConfigError("scheduling.policy", _unknown(name, SCHEDULERS.names()))
        return SCHEDULERS.get(name).Settings, SCHEDULERS.describe()[name]
    sections = section_models()
    if name not in sections:
        raise ConfigError("section", _unknown(name, list(sections)))
    model = sections[name]
    paragraph = (model.__doc__ or "").strip().split("\n\n")[0]  # the first whole paragraph
    return model, " ".join(paragraph.split()) or f"the [{name}] table"


def _unknown(name: str, allowed: list[str]) -> str:
    return f"unknown name {name!r}; allowed: {', '.join(allowed)}"


def registry_of(kind: str):
    """The registry of a kind, singular or as ``mecsim list`` names it (``algorithms``)."""
    import importlib

    singular = kind.removesuffix("s") if kind != "fading" else kind
    module, attribute = {
        "algorithm": ("mecsim.algorithms", "ALGORITHMS"),
        "model": ("mecsim.learning.models", "MODELS"),
        "dataset": ("mecsim.learning.data", "DATASETS"),
        "partition": ("mecsim.learning.data", "PARTITIONS"),
        "device": ("mecsim.learning.devices", "DEVICES"),
        "fading": ("mecsim.channels", "FADING"),
        "protocol": ("mecsim.protocols", "PROTOCOLS"),
        "scheduler": ("mecsim.policies.scheduling", "SCHEDULERS"),
        "power_control": ("mecsim.policies.power", "POWER_CONTROLS"),
        "allocation": ("mecsim.policies.allocation", "ALLOCATIONS"),
    }[singular]
    return getattr(importlib.import_module(module), attribute)


def _facts(kind: str, name: str) -> list[str]:
    """What a registered name is: a device's figures, a dataset's shape, a model's size."""
    if kind == "device":
        from dataclasses import fields

        device = registry_of(kind).get(name)
        return [f"  {f.name} = {getattr(device, f.name)!r}" for f in fields(device)]
    if kind == "dataset":
        from mecsim.learning.data import dataset_shape

        shape, classes = dataset_shape(name)
        return [f"  input shape {tuple(shape)}, {classes} classes"]
    if kind == "model":
        from mecsim.learning.data import dataset_shape
        from mecsim.learning.models.registry import build_model

        lines = []
        for dataset in ("digits", "cifar10"):
            shape, classes = dataset_shape(dataset)
            try:
                model = build_model(name, input_shape=shape, num_classes=classes, seed=0)
            except Exception as error:  # e.g. too deep for 8x8 inputs
                lines.append(f"  on {dataset} {tuple(shape)}: not buildable ({error})")
                continue
            params = sum(p.numel() for p in model.parameters())
            lines.append(f"  on {dataset} {tuple(shape)}: {params:,} parameters")
        return lines
    return []


def render_name(kind: str, name: str) -> str:
    """A registered model, dataset, device, fading or partition: what it is and the
    scenario keys that choose and tune it."""
    registry = registry_of(kind)
    if name not in registry:
        raise ConfigError(kind, _unknown(name, registry.names()))
    lines = [f"{kind} {name}: {registry.describe()[name]}", *_facts(kind, name)]
    section, keys = RELATED_KEYS.get(kind, ("clients", ("device",)))
    if kind == "device":
        lines += ["", "choose it with clients.device (or server.device, or a clients.table column)"]
        return "\n".join(lines) + "\n"
    model, _ = settings_of("section", section)
    rows = [r for r in settings_rows(model) if r["key"] in keys]
    lines += ["", f"keys under [{section}] that choose and tune it:", ""]
    width = max(len(r["key"]) for r in rows)
    for row in rows:
        detail = ", ".join(x for x in (row["type"], f"default {row['default']}", row["range"]) if x)
        lines.append(f"  {row['key'].ljust(width)}  {detail}  {row['description']}".rstrip())
    return "\n".join(lines) + "\n"


def render(kind: str, name: str) -> str:
    """The settings of ``kind`` ``name`` as an aligned text table."""
    if kind not in SETTINGS_KINDS:
        return render_name(kind, name)
    model, description = settings_of(kind, name)
    table = name if kind == "section" else TABLES[kind]
    how = f"--set {table}.KEY=VALUE"
    if kind == "section" and _is_array(name):  # one key of one element cannot be set
        how = f"each a table of [[{table}]]; --set '{table}=[{{KEY=VALUE, ...}}, ...]' sets all"
    rows = settings_rows(model, skip=("name", "kind", "policy") if kind != "section" else ())
    header = {"key": "key", "type": "type", "default": "default", "range": "range"}
    widths = {c: max(len(header[c]), *(len(r[c]) for r in rows)) for c in header}
    lines = [
        f"{kind} {name}: {description}",
        f"keys under [{table}] ({how}):",
        "",
    ]
    columns = list(header)
    lines.append("  ".join(header[c].ljust(widths[c]) for c in columns) + "  description")
    for row in rows:
        lines.append(
            "  ".join(row[c].ljust(widths[c]) for c in columns) + "  " + row["description"]
        )
    return "\n".join(line.rstrip() for line in lines) + "\n"


def reference_markdown() -> str:
    """Every setting of every algorithm, protocol and scenario section, as Markdown
    (``docs/reference.md``; regenerate with ``python -m mecsim.commands.describe > docs/reference.md``)."""
    from mecsim.algorithms import ALGORITHMS
    from mecsim.policies.scheduling import SCHEDULERS
    from mecsim.protocols import PROTOCOLS

    lines = [
        "# mecsim settings reference",
        "",
        "Generated from the pydantic models by `python -m mecsim.commands.describe > docs/reference.md`;",
        "a test checks that it is current. `mecsim describe KIND NAME` prints one entry.",
        "",
    ]
    entries = [("section", name) for name in section_models()]
    entries += [("algorithm", name) for name in ALGORITHMS.names()]
    entries += [("protocol", name) for name in PROTOCOLS.names()]
    entries += [("scheduler", name) for name in SCHEDULERS.names()]
    for kind, name in entries:
        model, description = settings_of(kind, name)
        table = name if kind == "section" else TABLES[kind]
        skip = () if kind == "section" else ("name", "kind", "policy")
        lines += [f"## {kind} `{name}`", "", description, "", f"Keys under `[{table}]`:", ""]
        lines += [
            "| key | type | default | range | description |",
            "| --- | --- | --- | --- | --- |",
        ]
        for row in settings_rows(model, skip):
            cells = [
                f"`{row['key']}`",
                row["type"],
                row["default"],
                row["range"],
                row["description"],
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    sys.stdout.write(reference_markdown())
