"""Held-out pass@1 of a policy on an environment's split, with a Wilson confidence interval.

pass@1 is the share of episodes whose outcome says success, one sampled rollout each (at ``temperature``, 1.0 by
default: the policy as it is trained, not its greedy decoding). ``n`` episodes go round the split's tasks in a
seeded order, so that every task is played ``n // len(split)`` or one more times and the same ``(n, seed)``
plays the same episodes with the same sampling seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, NamedTuple

from platoon.live.envs.play import Limits, play_batch
from platoon.live.model import derive_seed

__all__ = ["EvalResult", "evaluate", "wilson_interval"]


class EvalResult(NamedTuple):
    pass_at_1: float
    ci_low: float
    ci_high: float


def wilson_interval(successes: int, n: int, *, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% at z = 1.96); (0, 1) when ``n`` is 0.

    ``(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`` with ``p = successes / n``.
    """
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in 0..{n}, got {successes}")
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def evaluate(model: Any, env: Any, tasks: str | Sequence[str], n: int, *, temperature: float = 1.0,
             seed: int = 0, batch_size: int = 256, renderer: Any = None, limits: Limits = Limits()) -> EvalResult:
    """pass@1 of ``model`` (a ``Policy``) over ``n`` episodes of ``tasks`` (task ids, or a split's name), with its
    95% Wilson interval; played through the harness with ``renderer`` (None: ``role_colon`` over the tiny
    tokenizer of the environment's words) within ``limits``."""
    if n < 1:
        raise ValueError(f"evaluate: n must be at least 1, got {n}")
    ids = env.task_ids(tasks) if isinstance(tasks, str) else list(tasks)
    if not ids:
        raise ValueError(f"evaluate: {tasks!r} holds no tasks")
    order = list(ids)
    random.Random(f"evaluate:{seed}").shuffle(order)
    successes = 0
    for start in range(0, n, batch_size):
        idx = range(start, min(n, start + batch_size))
        tasks = [env.task(order[j % len(order)]) for j in idx]
        trajectories = play_batch(model, env, tasks, temperature=temperature,
                                  seeds=[derive_seed(seed, "evaluate", j) for j in idx], renderer=renderer,
                                  limits=limits)
        successes += sum(t.success for t in trajectories)
    low, high = wilson_interval(successes, n)
    return EvalResult(successes / n, low, high)
