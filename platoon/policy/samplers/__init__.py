"""Task samplers: the API (`base`), core's samplers (`uniform`, `weighted`, `pass_rate`), resolution (`resolve`)
and `SamplerSet` (`runtime`), which the dispatcher drives.

`runtime` is not imported here, since it imports `platoon.policy.pool`, which imports `base`.
"""

from platoon.policy.samplers.base import (
    Draw,
    EntryInfo,
    Sampler,
    SamplerContext,
    SamplerError,
    SamplerSetup,
    Slot,
    TaskSampler,
    TaskStatsView,
    decision_key,
)
from platoon.policy.samplers.pass_rate import PassRateSampler
from platoon.policy.samplers.resolve import resolve_task_sampler
from platoon.policy.samplers.uniform import UniformSampler
from platoon.policy.samplers.weighted import WeightedSampler

__all__ = [
    "Draw",
    "EntryInfo",
    "PassRateSampler",
    "Sampler",
    "SamplerContext",
    "SamplerError",
    "SamplerSetup",
    "Slot",
    "TaskSampler",
    "TaskStatsView",
    "UniformSampler",
    "WeightedSampler",
    "decision_key",
    "resolve_task_sampler",
]
