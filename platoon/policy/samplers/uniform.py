"""``uniform``: the pool in seeded passes, every row exactly once per pass (static; no options).

Decision ``n`` is offset ``n mod N`` of pass ``n // N`` over the sampler's ``N`` rows, answered by row (`Row`), so
a pool that repeats an id is drawn row by row. Pass ``p``:
- entry level: ``list(range(N))`` shuffled by ``random.Random(S + 101 p).shuffle``, ``S = entry.seed + 10007 *
  entry.index``;
- run level: ``numpy.random.default_rng(42 + 101 p).permutation(N)``.
Two passes are cached (the current one and the one before), so it is a cheap pure function of ``n``. It reads no
decision key, so ``train.seed`` does not change its passes (docs/task-samplers.md).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from platoon.policy.samplers.base import Row, Sampler, SamplerContext, SamplerSetup


class UniformSampler(Sampler):
    """Seeded passes over the pool; see the module doc."""

    adaptive = False
    entry_slots = False
    options_schema = None

    def __init__(self, setup: SamplerSetup, options: Any = None) -> None:
        super().__init__(setup, options)
        self._n = len(setup.task_ids)
        if self._n == 0:
            raise ValueError(f"{setup.name}: uniform has no tasks to draw")
        self._base: int | None = None
        if setup.level == "entry" and setup.entry in setup.entries:
            info = setup.entries[setup.entry]
            self._base = info.seed + info.index * 10007
        elif setup.level == "entry":
            self._base = 0
        self._passes: dict[int, Any] = {}

    def _pass(self, p: int) -> Any:
        order = self._passes.get(p)
        if order is None:
            if self._base is None:
                order = np.random.default_rng(42 + 101 * p).permutation(self._n)
            else:
                order = list(range(self._n))
                random.Random(self._base + 101 * p).shuffle(order)
            self._passes = {q: o for q, o in self._passes.items() if q == p - 1}
            self._passes[p] = order
        return order

    def next(self, ctx: SamplerContext) -> Row:
        p, offset = divmod(int(ctx.decision), self._n)
        return Row(int(self._pass(p)[offset]))
