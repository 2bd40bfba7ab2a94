"""How long a call of the policy layer's takes, measured by a runtime (the policy layer reads no clock).

``measured_call`` is what both runtimes hand ``build_policy(measure=)``: the sampler set calls each sampler decision
through it and takes the seconds it answers as its measurement (``train/sampler/decision_ms``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def measured_call(fn: Callable[[Any], Any], arg: Any) -> tuple[Any, Exception | None, float]:
    """``fn(arg)``'s value (None when it raised), the ``Exception`` it raised (None when it did not), and the wall
    seconds it took; anything but an ``Exception`` (a ``KeyboardInterrupt``) propagates."""
    t0 = time.perf_counter()
    try:
        value, error = fn(arg), None
    except Exception as exc:  # noqa: BLE001 - the policy layer judges a sampler's failure
        value, error = None, exc
    return value, error, time.perf_counter() - t0


__all__ = ["measured_call"]
