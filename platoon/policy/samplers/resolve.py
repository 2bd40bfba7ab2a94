"""Resolving a task sampler reference to its class, parsing its options, and naming it.

``resolve_task_sampler(ref)`` works in this order (docs/task-samplers.md):
1. core names map to fixed classes (``weighted``, ``uniform``, ``pass_rate``); nothing registered shadows them;
2. ``auto`` is an error here: it names no class (the config resolves it);
3. a name without ``:`` must be registered (``@task_sampler``), else ``unknown task sampler '<x>'`` with a
   did-you-mean and core's names;
4. ``module:Class`` is imported (an import failure names the exception);
5. the class must be a class with callable ``next``, ``state_dict`` and ``load_state_dict``, a bool ``adaptive``,
   not both ``entry_slots`` and adaptive, and a ``next`` that is not a coroutine function.
Every refusal is an `ExtensionError`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from platoon.config import component_resolution as resolution
from platoon.config.component_resolution import find_class, options_schema
from platoon.config.errors import ExtensionError
from platoon.policy.samplers.pass_rate import PassRateSampler
from platoon.policy.samplers.uniform import UniformSampler
from platoon.policy.samplers.weighted import WeightedSampler

CORE_CLASSES: dict[str, type] = {
    "weighted": WeightedSampler,
    "uniform": UniformSampler,
    "pass_rate": PassRateSampler,
}
"""Core's sampler names and their fixed classes (``auto`` resolves to weighted or uniform in the runtime)."""


SAVED_CORE_CLASSES: dict[type, str] = {
    WeightedSampler: "platoon.train.samplers:WeightedSampler",
    UniformSampler: "platoon.train.samplers:UniformSampler",
    PassRateSampler: "platoon.train.samplers:PassRateSampler",
}
"""The class paths a dispatch state's ``samplers`` records name core's classes by: platoon 0.4.0's, so that 0.4.0
reads a state this platoon wrote and each takes the other's samplers up where they stood."""


def saved_class_ref(cls: type) -> str:
    """The class path a dispatch state records for ``cls``: 0.4.0's for a core class, else ``module:Qualname``."""
    for core, ref in SAVED_CORE_CLASSES.items():
        if cls is core:
            return ref
    return class_ref(cls)


def saved_class_refs(cls: type) -> tuple[str, ...]:
    """Every class path a saved ``samplers`` record may name ``cls`` by: the one :func:`saved_class_ref` writes and
    ``module:Qualname`` (what this platoon wrote before it wrote 0.4.0's)."""
    return tuple(dict.fromkeys((saved_class_ref(cls), class_ref(cls))))


def is_core(cls: type) -> bool:
    """Whether ``cls`` is one of core's classes (they get no fallback: their failures stop the run)."""
    return any(cls is c for c in CORE_CLASSES.values())


def class_ref(cls: type) -> str:
    """``module:Qualname`` of a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_task_sampler(ref: str) -> type:
    """The class that ``ref`` names (see the module doc); ExtensionError when it names none or a bad one."""
    if not isinstance(ref, str) or not ref:
        raise ExtensionError(f"a task sampler is a name or module:Class, got {ref!r}")
    if ref in CORE_CLASSES:
        return CORE_CLASSES[ref]
    if ref == "auto":
        raise ExtensionError("task sampler 'auto' names no class: the run resolves it to weighted or uniform")
    cls = find_class("task_sampler", ref)
    validate_sampler_class(cls, ref)
    return cls


def validate_sampler_class(cls: Any, ref: str) -> None:
    """Raise ExtensionError naming what is wrong with ``cls`` as a task sampler (2.2's class validity)."""
    if not isinstance(cls, type):
        raise ExtensionError(f"task sampler {ref!r} is not a class but {type(cls).__name__}")
    problems = [
        name for name in ("next", "state_dict", "load_state_dict") if not callable(getattr(cls, name, None))
    ]
    if problems:
        raise ExtensionError(f"task sampler {ref!r} lacks callable {', '.join(problems)}")
    adaptive = getattr(cls, "adaptive", None)
    if not isinstance(adaptive, bool):
        raise ExtensionError(f"task sampler {ref!r}: adaptive must be True or False, got {adaptive!r}")
    if adaptive and getattr(cls, "entry_slots", False):
        raise ExtensionError(
            f"task sampler {ref!r} is adaptive and hands entry slots; it may be one or the other"
        )
    if inspect.iscoroutinefunction(cls.next):
        raise ExtensionError(f"task sampler {ref!r}: next must be a plain (synchronous) method, not async")


def parse_options(cls: type, raw: Mapping[str, Any] | None) -> Any:
    """Parse ``raw`` options against ``cls.options_schema`` (``component_resolution.parse_options``); ValueError
    naming the problem.

    A dataclass schema refuses unknown keys; a pydantic model validates (its errors become one line); a function
    parses, and what it raises is raised as is; None takes no options (``{}`` only).
    """
    try:
        return resolution.parse_options(options_schema(cls), raw)
    except resolution.OptionsRefused as refused:
        raise _options_error(refused, options_schema(cls), raw) from None


def _options_error(refused: resolution.OptionsRefused, schema: Any, raw: Mapping[str, Any] | None) -> Exception:
    """The ValueError a sampler's refused options raise; what the schema itself raised is raised unchanged."""
    error = refused.error
    if refused.reason == resolution.NO_OPTIONS:
        return ValueError(f"takes no options; got {sorted(dict(raw or {}))}")
    if refused.reason == resolution.UNKNOWN_KEYS:
        unknown = sorted(refused.unknown)
        return ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    if refused.reason == resolution.BAD_SCHEMA:
        return ValueError(f"options_schema {schema!r} is not a dataclass, a pydantic model, a function or None")
    if refused.form == resolution.MODEL and isinstance(error, ValidationError):
        lines = [f"{'.'.join(str(p) for p in e['loc']) or '<options>'}: {e['msg']}" for e in error.errors()]
        return ValueError("; ".join(lines))
    if refused.form == resolution.DATACLASS and isinstance(error, TypeError):
        return ValueError(str(error))
    assert error is not None  # the remaining reasons carry what the schema raised
    return error


def options_seed(parsed: Any) -> int:
    """The parsed options' integer ``seed`` field, else 0 (it is added to the decision-key seed)."""
    seed = parsed.get("seed") if isinstance(parsed, Mapping) else getattr(parsed, "seed", None)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0
