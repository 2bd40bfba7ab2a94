"""The formulas of the statistics: a task's Beta posterior, what a group of k draws from it, and pass-rate bands.

What this module owns: the prior (``PRIOR_STRENGTH``, ``prior_centre``), the weight of evidence by its age
(``evidence_weight``, ``evidence_weights``), the posterior's parameters (``posterior_params``), the chances a group
of k rollouts passes or mixes (``pass_at``, ``informative_at``), and the bands of a pass rate (``BANDS``, ``band``).
Pure functions of numbers; the store (``platoon.policy.stats``) feeds them its counts.

Rules it keeps:
- reads never amplify: evidence ``age`` versions old weighs ``2 ** (-age / HALF_LIFE_VERSIONS)``, and 1 when the age
  is 0 or less (or unknown, NaN);
- a formula is written once and serves one task and many alike: the scalar and the array reads of a posterior give
  equal floats, bit for bit (a sampler scores many tasks at once, a report reads one);
- every function that takes ``a``, ``b``, ``m``, ``s``, ``f`` works element-wise on numpy arrays too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from platoon.policy.records import HALF_LIFE_VERSIONS

PRIOR_STRENGTH = 2.0
"""Total pseudo-count weight of a task's prior."""
BANDS = ("zero", "low", "mid", "high", "solved")
"""Bands of the posterior mean pass rate (see `band`)."""


def prior_centre(passes: float, fails: float) -> float:
    """``m = (1 + P) / (2 + P + F)``: the centre of a task's prior from its entry's decayed ``(passes, fails)``."""
    return (1.0 + passes) / (2.0 + passes + fails)


def evidence_weight(age: float) -> float:
    """``2 ** (-age / HALF_LIFE_VERSIONS)`` for ``age > 0``, else 1 (NaN, no evidence, included).

    numpy's power, not Python's pow: the two differ in the last bit now and then, and this read must equal the
    vectorised one (`evidence_weights`) exactly.
    """
    return float(np.power(2.0, -age / HALF_LIFE_VERSIONS)) if age > 0 else 1.0


def evidence_weights(ages: np.ndarray) -> np.ndarray:
    """`evidence_weight` of each age, as a new float array."""
    w = np.power(2.0, -ages / HALF_LIFE_VERSIONS)
    w[~(ages > 0)] = 1.0  # no evidence (NaN) or none older than now: weight 1
    return w


def posterior_params(m: Any, s: Any, f: Any) -> tuple[Any, Any]:
    """``(alpha, beta) = (PRIOR_STRENGTH * m + s, PRIOR_STRENGTH * (1 - m) + f)``: prior centre ``m``, weighted
    evidence ``(s, f)``."""
    return PRIOR_STRENGTH * m + s, PRIOR_STRENGTH * (1.0 - m) + f


def pass_at(alpha: Any, beta: Any, k: int) -> Any:
    """``1 - prod_{i<k} (beta+i)/(alpha+beta+i)``: the posterior chance that some of k rollouts pass; 0 for
    ``k <= 0``.

    ``alpha`` and ``beta`` (0.4.0's names) may be floats or numpy arrays (element-wise); ``pass_at(alpha, beta, 1)``
    is the mean ``alpha/(alpha+beta)``.
    """
    if k <= 0:
        return 0.0 * (alpha + beta)
    fail_all = 1.0
    for i in range(int(k)):
        fail_all = fail_all * ((beta + i) / (alpha + beta + i))
    return 1.0 - fail_all


def informative_at(alpha: Any, beta: Any, k: int) -> Any:
    """``max(0, pass_at(alpha, beta, k) - prod_{i<k} (alpha+i)/(alpha+beta+i))``, i.e. ``E[1 - p^k - (1-p)^k]``,
    p ~ Beta(alpha, beta).

    The chance that a group of k mixes passes and failures (so that it trains). It is 0 for ``k = 1`` apart from
    rounding, hence the clamp. Element-wise on numpy arrays.
    """
    pass_all = 1.0
    for i in range(max(int(k), 0)):
        pass_all = pass_all * ((alpha + i) / (alpha + beta + i))
    mixed = pass_at(alpha, beta, k) - (pass_all if k > 0 else 0.0)
    return np.maximum(mixed, 0.0) if isinstance(mixed, np.ndarray) else max(0.0, float(mixed))


def band(rate: float) -> str:
    """``zero`` (<= .05), ``low`` (<= .2), ``mid`` (< .8), ``high`` (< .95), else ``solved``."""
    if rate <= 0.05:
        return "zero"
    if rate <= 0.2:
        return "low"
    if rate < 0.8:
        return "mid"
    if rate < 0.95:
        return "high"
    return "solved"
