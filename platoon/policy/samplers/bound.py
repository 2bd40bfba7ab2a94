"""What a `SamplerSet` decision gives the dispatcher (`Bound`, `Token`), and the runtime's timer it calls samplers
through (`Measure`).

Rules it keeps: both are frozen; a `Bound` names the sampler to record (the run's under a fallback slot), a `Token`
only a position and an entry, decided once a group of that entry can start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from platoon.policy.pool import TaskRow


@dataclass(frozen=True)
class Bound:
    """A decision that bound a draw: the pool row, the qualified sampler name to record, its reason and score."""

    row: TaskRow
    sampler: str
    reason: str
    score: float | None


@dataclass(frozen=True)
class Token:
    """A position handed to an adaptive entry sampler, decided once a group of that entry can start.
    ``fallback``: the run sampler's fallback handed the slot (the draw is then the run's fallback)."""

    position: int
    entry: str
    fallback: bool


Measure = Callable[[Callable[[Any], Any], Any], tuple[Any, "Exception | None", float]]
"""``measure(fn, arg) -> (fn(arg) or None, the Exception it raised or None, seconds it took)``: a runtime's."""
