"""Task samplers: the API (`base`), core's samplers (`uniform`, `weighted`, `pass_rate`) and their names (`core`),
and `SamplerSet` (`runtime`), which the dispatcher drives. A sampler named by a registered name or ``module:Class``
is found above this layer (``platoon.components.samplers``), which hands `SamplerSet` classes and parsed options.

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
from platoon.policy.samplers.core import CORE_CLASSES
from platoon.policy.samplers.pass_rate import PassRateSampler
from platoon.policy.samplers.uniform import UniformSampler
from platoon.policy.samplers.weighted import WeightedSampler

__all__ = [
    "CORE_CLASSES",
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
]
