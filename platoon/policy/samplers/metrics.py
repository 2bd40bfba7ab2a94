"""Per-step sampler metrics (2.7): draw counts by reason, decision times, consumed-group shares, and the checks
a sampler's own metrics pass.

Metric keys per sampler are written under its prefix: ``train/sampler/`` for the run's, and
``train/sampler/environment/<entry>/`` for an entry's (``/`` in the name becomes ``--``). A reason gets its own
key ``draws/<reason>`` if it is ``fallback`` or ``reissue``, or matches ``[a-z][a-z0-9_]{0,31}`` while the prefix
has used fewer than 16 reason keys; otherwise it counts under ``draws/other``. A reason keeps its key for the run.
"""

from __future__ import annotations

import math
import numbers
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RESERVED_METRICS = frozenset(
    {
        "draws",
        "decision_ms",
        "decision_ms_max",
        "tokens",
        "skipped_slots",
        "predicted_informative",
        "informative_share",
        "loss_weight_min",
        "loss_weight_max",
    }
)
MAX_REASON_KEYS = 16
_REASON_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}")
RUN_PREFIX = "train/sampler/"


def entry_prefix(entry: str) -> str:
    """``train/sampler/environment/<entry>/`` with ``/`` in the entry's name written ``--``."""
    return f"{RUN_PREFIX}environment/{entry.replace('/', '--')}/"


@dataclass
class Counters:
    """One metric prefix's counts since the last step."""

    draws: int = 0
    reasons: Counter = field(default_factory=Counter)
    reason_keys: set = field(default_factory=set)
    ms_sum: float = 0.0
    ms_max: float = 0.0
    ms_n: int = 0
    consumed: int = 0
    trained: int = 0
    score_sum: float = 0.0
    score_n: int = 0
    weight_min: float = math.inf  # the loss weights of the step's trained groups, after scaling (weighing samplers)
    weight_max: float = -math.inf

    def reason_key(self, reason: str) -> str:
        if reason in self.reason_keys:
            return reason
        if reason in ("fallback", "reissue") or (
            _REASON_KEY.fullmatch(reason) and len(self.reason_keys) < MAX_REASON_KEYS
        ):
            self.reason_keys.add(reason)
            return reason
        return "other"

    def count(self, reason: str) -> None:
        self.draws += 1
        self.reasons[self.reason_key(reason)] += 1

    def reset(self) -> None:
        keys = self.reason_keys
        self.__init__()  # type: ignore[misc]
        self.reason_keys = keys  # a reason keeps its key for the run


def clean_metrics(raw: Any) -> tuple[dict[str, float], str | None, list[str]]:
    """A sampler's own ``metrics()`` answer checked: ``(kept, problem, reserved)``. A non-mapping, a non-string
    key or a value that is not a finite real number drops the whole mapping (``problem`` says why); reserved keys
    (`RESERVED_METRICS`, ``draws/...``) are left out and listed."""
    if not isinstance(raw, Mapping):
        return {}, f"gave {type(raw).__name__}, not a mapping", []
    for k, v in raw.items():
        if not isinstance(k, str):
            return {}, f"gave a non-string key {k!r}", []
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            return {}, f"gave {k!r}: {v!r}, not a finite number", []
    reserved = sorted(k for k in raw if k in RESERVED_METRICS or k.startswith("draws/"))
    return {k: float(v) for k, v in raw.items() if k not in reserved}, None, reserved
