"""Core's task samplers by name, and the class paths a dispatch state and ``lock.json`` name a sampler class by.

What this module owns: ``CORE_CLASSES`` (core's names and their fixed classes), ``is_core``, ``class_ref`` and the
saved spellings of a class (``saved_class_ref``, ``saved_class_refs``), and ``options_seed``.

Rules it keeps:
- it finds nothing: a reference other than core's is resolved above the policy layer (``platoon.components``), which
  hands `SamplerSet` the classes and their parsed options; this module only names what it is handed;
- core's classes are recorded by platoon 0.4.0's paths, so that 0.4.0 and this platoon read each other's states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def options_seed(parsed: Any) -> int:
    """The parsed options' integer ``seed`` field, else 0 (it is added to the decision-key seed)."""
    seed = parsed.get("seed") if isinstance(parsed, Mapping) else getattr(parsed, "seed", None)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0
