"""Core components' names and option schemas.

These live in the config layer (not beside the classes in ``platoon.policy``) because a config's core options are
checked when it loads, and the config layer may not import the policy layer. The policy layer imports them.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

CORE_TASK_SAMPLERS = ("auto", "weighted", "uniform", "pass_rate")
"""Names core owns at ``train.task_sampler``; nothing registered may take them."""

ENTRY_TASK_SAMPLERS = ("uniform", "pass_rate")
"""Core names an environment entry's own ``task_sampler`` may take (auto and weighted share the run's slots)."""

CORE_GROUP_ADMISSIONS = ("all", "informative")
"""Names core owns at ``train.group_admission``."""


class PassRateOptions(BaseModel):
    """Options of the adaptive ``pass_rate`` sampler (Thompson sampling on each task's pass-rate posterior)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    explore: float = Field(0.2, description="Share of draws given to the least recently drawn tasks, in [0, 1].")
    max_draws_per_epoch: int | None = Field(
        3, description="At most this many draws of one task per pool-sized window of decisions; null: no cap."
    )
    max_outstanding_per_task: int | None = Field(
        None, description="At most this many groups of one task in flight at once; null: no limit."
    )
    candidates: int = Field(4096, description="Thompson-score at most this many randomly chosen tasks a decision.")
    seed: int = Field(0, description="Added to the decision-key seed, to vary draws without changing the run seed.")

    @field_validator("explore", mode="before")
    @classmethod
    def _explore(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= 1:
            raise ValueError(f"must be between 0 and 1, got {v!r}")
        return v

    @field_validator("max_draws_per_epoch", "max_outstanding_per_task", mode="before")
    @classmethod
    def _positive_or_null(cls, v: object) -> object:
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"must be an integer from 1, or null, got {v!r}")
        return v

    @field_validator("candidates", mode="before")
    @classmethod
    def _candidates(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"must be an integer from 1, got {v!r}")
        return v

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"must be an integer, got {v!r}")
        return v


class InformativeOptions(BaseModel):
    """Options of the ``informative`` group admission rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    band: tuple[float, float] | None = Field(
        None, description="Also reject groups whose pass rate (passes / valid members) lies outside [lo, hi]."
    )

    @field_validator("band", mode="before")
    @classmethod
    def _band(cls, v: object) -> object:
        if v is None:
            return v
        ok = (
            isinstance(v, list | tuple)
            and len(v) == 2
            and all(not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x) for x in v)
            and 0 <= v[0] < v[1] <= 1
        )
        if not ok:
            raise ValueError(f"must be two numbers lo < hi between 0 and 1, got {v!r}")
        return tuple(float(x) for x in v)


CORE_OPTIONS: dict[tuple[str, str], type[BaseModel] | None] = {
    ("task_sampler", "auto"): None,
    ("task_sampler", "weighted"): None,
    ("task_sampler", "uniform"): None,
    ("task_sampler", "pass_rate"): PassRateOptions,
    ("group_admission", "all"): None,
    ("group_admission", "informative"): InformativeOptions,
}
"""(kind, core name) -> options model; None means the component takes no options."""
