"""Resolving a task sampler reference to its class, parsing its options, and a run's samplers resolved together.

``resolve_task_sampler(ref)`` works in this order (docs/task-samplers.md):
1. core names map to fixed classes (``weighted``, ``uniform``, ``pass_rate``); nothing registered shadows them;
2. ``auto`` is an error here: it names no class (``resolve_samplers`` resolves it);
3. a name without ``:`` must be registered (``@task_sampler``), else ``unknown task sampler '<x>'`` with a
   did-you-mean and core's names;
4. ``module:Class`` is imported (an import failure names the exception);
5. the class must be a class with callable ``next``, ``state_dict`` and ``load_state_dict``, a bool ``adaptive``,
   not both ``entry_slots`` and adaptive, and a ``next`` that is not a coroutine function.
Every refusal is an `ExtensionError`; refused options are a ``ValueError`` naming the problem.

``resolve_samplers`` resolves a run's sampler and, under a slot-handing one, each entry's (default ``uniform``),
into the `SamplerSpec`\\ s that `SamplerSet` is built from: the policy layer receives classes and parsed options.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from platoon.config import component_resolution as resolution
from platoon.config.component_resolution import find_class, options_schema
from platoon.config.errors import ExtensionError
from platoon.policy import (
    CORE_SAMPLER_CLASSES,
    Measure,
    SamplerSet,
    SamplerSpec,
    TaskPool,
    UniformSampler,
    WeightedSampler,
)


def resolve_task_sampler(ref: str) -> type:
    """The class that ``ref`` names (see the module doc); ExtensionError when it names none or a bad one."""
    if not isinstance(ref, str) or not ref:
        raise ExtensionError(f"a task sampler is a name or module:Class, got {ref!r}")
    if ref in CORE_SAMPLER_CLASSES:
        return CORE_SAMPLER_CLASSES[ref]
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


def resolve_samplers(
    entries: Mapping[str, Any],
    *,
    run_sampler: str,
    run_options: Mapping[str, Any] | None,
    entry_samplers: Mapping[str, tuple[str | None, Mapping[str, Any] | None]],
) -> tuple[SamplerSpec, dict[str, SamplerSpec]]:
    """The run's sampler and, when it hands slots, each entry's: ``(run's spec, entries' specs by label)``.

    ``entries`` are the pool's entries (labels with training tasks, in order); ``run_sampler`` is
    ``train.task_sampler`` as configured (``auto``: uniform for one entry whose own sampler is uniform, else
    weighted); ``entry_samplers`` maps an entry to its ``(name, options)`` (default uniform). ExtensionError for a
    reference that names no sampler class, ValueError for refused options (the run's first, then each entry's).
    """
    run_name = run_sampler or "auto"
    if run_name == "auto":
        own = [(entry_samplers.get(e) or ("uniform", None))[0] or "uniform" for e in entries]
        cls: type = UniformSampler if len(entries) == 1 and own == ["uniform"] else WeightedSampler
    else:
        cls = resolve_task_sampler(run_name)
    run = SamplerSpec(run_name, cls, parse_options(cls, run_options))
    own_specs: dict[str, SamplerSpec] = {}
    if getattr(cls, "entry_slots", False):
        for label in entries:
            ref, options = entry_samplers.get(label) or ("uniform", None)
            ref = ref or "uniform"
            ecls = resolve_task_sampler(ref)
            own_specs[label] = SamplerSpec(ref, ecls, parse_options(ecls, options))
    return run, own_specs


def sampler_set(
    pool: TaskPool,
    *,
    run_sampler: str,
    run_options: Mapping[str, Any] | None,
    entry_samplers: Mapping[str, tuple[str | None, Mapping[str, Any] | None]],
    batch_size: int,
    seed: int,
    measure: Measure | None = None,
) -> SamplerSet:
    """A `SamplerSet` over ``pool`` from the config's references (``resolve_samplers``); see `SamplerSet`."""
    if len(pool) == 0:
        raise ValueError("the run has no training tasks to sample")
    run, entries = resolve_samplers(
        pool.entries, run_sampler=run_sampler, run_options=run_options, entry_samplers=entry_samplers
    )
    return SamplerSet(pool, run=run, entries=entries, batch_size=batch_size, seed=seed, measure=measure)
