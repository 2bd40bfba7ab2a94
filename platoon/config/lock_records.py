"""The records lock.json keeps of a run's resolved components (docs/run-directory.md).

What this module owns: ``ComponentRecord`` (one task sampler, group admission rule or environment, resolved) and
how one is built from a resolved class and its parsed options (``component_record``).

Rules it keeps:
- every record says where its component came from as platoon 0.4.0's lock.json does (``source``,
  ``distribution``, ``distribution_version``, ``entry_point``: ``registry.component_origin``);
- core components' classes live in ``platoon.policy`` and ``platoon.live``, which this layer may not import: their
  records carry ``core`` (the core component that runs) and the class path ``CORE_CLASS_PATHS`` names as
  ``resolved``;
- options are recorded parsed, defaults included, JSON-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from platoon.config import registry
from platoon.config.components import CORE_CLASS_PATHS


@dataclass(frozen=True)
class ComponentRecord:
    """One resolved component, as lock.json records it (docs/run-directory.md).

    A run-level record lists every entry it serves and keeps its options under ``"train"``; an entry-level record
    groups the entries that name the same component and keeps each one's options under its label. Options are
    parsed, defaults included, JSON-safe.
    """

    kind: str
    """``task_sampler``, ``group_admission`` or ``environment``."""
    ref: str
    """The name as the config wrote it (``auto``, ``pass_rate``, ``mine``, ``pkg.mod:Cls``)."""
    level: str
    environments: tuple[str, ...]
    options: Mapping[str, Any]
    resolved: str | None = None
    """``module:Qualname`` of the class that runs (core's too)."""
    core: str | None = None
    """The core component that runs (``auto`` decided: weighted or uniform); None for others."""
    source: str | None = None
    """Where the class is defined, ``module:Qualname``, as platoon 0.4.0 spells it (the same as ``resolved``)."""
    distribution: str | None = None
    """The installed distribution that provides it (``platoon`` for core's); None for code none holds."""
    distribution_version: str | None = None
    entry_point: str | None = None
    """``group:name`` of the entry point whose loading registered it; None for core's, ``module:Class`` references
    and what a ``package`` registered."""
    cls: type | None = field(default=None, compare=False, repr=False)
    parsed: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """``"train"`` or label -> the options as the schema parsed them (what the component is built with)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ref": self.ref,
            "resolved": self.resolved,
            "source": self.source,
            "distribution": self.distribution,
            "distribution_version": self.distribution_version,
            "entry_point": self.entry_point,
            "core": self.core,
            "level": self.level,
            "environments": list(self.environments),
            "options": {k: jsonable(v) for k, v in self.options.items()},
        }


def component_record(
    kind: str,
    name: str,
    level: str,
    cls: type | None,
    good: dict[str, Any],
    core: str | None,
    environments: tuple[str, ...] | None = None,
) -> ComponentRecord:
    """The record of component ``name`` (class ``cls``, None for core's ``core``) with its parsed options ``good``
    (``"train"`` or label -> options); ``environments`` defaults to the labels of ``good``."""
    if cls is None:  # core's: the class is named, not imported; the origin is core's
        resolved = CORE_CLASS_PATHS[(kind, core or name)]
        origin = registry.module_origin(resolved.partition(":")[0])
    else:
        resolved = class_ref(cls)
        origin = registry.component_origin(kind, name, cls.__module__)
    return ComponentRecord(
        kind=kind,
        ref=name,
        level=level,
        environments=tuple(good) if environments is None else environments,
        options={k: jsonable(v) for k, v in good.items()},
        resolved=resolved,
        core=core,
        source=resolved,
        distribution=origin.distribution,
        distribution_version=origin.version,
        entry_point=origin.entry_point,
        cls=cls,
        parsed=good,
    )


def class_ref(cls: type | None) -> str | None:
    """``module:Qualname`` of ``cls``; None for None (a core component, named and not imported)."""
    return None if cls is None else f"{cls.__module__}:{cls.__qualname__}"


def jsonable(obj: Any) -> Any:
    """Parsed options as JSON-safe data: models and dataclasses as their fields, sets sorted, anything else its repr."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted((jsonable(v) for v in obj), key=repr)
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return repr(obj)
