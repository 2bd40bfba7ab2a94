"""``weighted``: hands each slot to an entry by weight; the entry's own sampler fills it (static; no options).

Shares are ``weight_i / sum(weights)`` over the entries that have tasks, in config order (a weight of None counts
the entry's tasks). Decision ``d`` runs the credit algorithm ``d + 1`` times from zero credits and cursor 0:
1. ``credits[i] += share[i]`` for every entry;
2. ``best = max(credits)``;
3. scanning ``cursor, cursor + 1, ...`` (mod count), choose the first credit within 1e-12 of ``best`` (absolute);
4. ``credits[chosen] -= 1``, ``cursor = chosen + 1`` (mod count); the answer is ``Slot(labels[chosen])``.
The same float operations in the same order reproduce 0.3.0's WeightedOrder. Progress is cached and continued
forward; a decision earlier than the progress replays from 0. The state is ``{}``: credits are a function of ``d``.
"""

from __future__ import annotations

from typing import Any

from platoon.policy.samplers.base import Sampler, SamplerContext, SamplerSetup, Slot

TIE = 1e-12


class WeightedSampler(Sampler):
    """Slots to entries in proportion to their weights; see the module doc."""

    adaptive = False
    entry_slots = True
    options_schema = None

    def __init__(self, setup: SamplerSetup, options: Any = None) -> None:
        super().__init__(setup, options)
        self._labels = list(setup.entries)
        if not self._labels:
            raise ValueError(f"{setup.name}: weighted needs at least one entry with tasks")
        weights = [
            float(e.weight) if e.weight is not None else float(len(e.task_ids))
            for e in setup.entries.values()
        ]
        total = sum(weights)
        if not total > 0:
            raise ValueError(f"{setup.name}: the entries' weights sum to {total}, not a positive number")
        self._shares = [w / total for w in weights]
        self._reset()

    def _reset(self) -> None:
        self._credits = [0.0] * len(self._labels)
        self._cursor = 0
        self._done = 0
        self._last = 0

    def _step(self) -> int:
        credits, k = self._credits, len(self._credits)
        for i, share in enumerate(self._shares):
            credits[i] += share
        best = max(credits)
        chosen = self._cursor
        for j in range(k):
            i = (self._cursor + j) % k
            if abs(credits[i] - best) <= TIE:
                chosen = i
                break
        credits[chosen] -= 1.0
        self._cursor = (chosen + 1) % k
        return chosen

    def next(self, ctx: SamplerContext) -> Slot:
        d = int(ctx.decision)
        if d < 0:
            raise ValueError(f"decision {d} is negative")
        if d < self._done - 1:
            self._reset()
        while self._done <= d:
            self._last = self._step()
            self._done += 1
        return Slot(self._labels[self._last])
