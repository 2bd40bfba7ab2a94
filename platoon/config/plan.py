"""How a run draws its training tasks: each environment's share of the slots, and how often each of its tasks is
drawn over the planned steps (``platoon config validate --tasks``).

What this module owns: ``sampling_plan(cfg, tasks)``, given the training tasks each entry lists (by label, as the
run lists them), and the plan's lines and warnings. It imports nothing but the config layer: the caller lists the
tasks.

Rules it keeps:
- the run's slots are ``steps x train.batch_size`` (``planned_steps``) (a step trains ``batch_size`` groups; a group admission rule
  draws more, so the numbers are what a step trains);
- under a run sampler that hands slots by weight (``weighted``, ``auto`` over a mixture) an entry's share is its
  weight over the weights of the entries that have tasks (``weight: tasks`` counts its tasks); under one that draws
  among every task of the run (``uniform``, ``pass_rate``, ``auto`` over one entry) an entry's share is its tasks over
  all; under another sampler the shares are its own, and the plan says only how many tasks each entry lists;
- it warns, as platoon 0.4.0 does, of a mixture whose weights leave tasks out of a run long enough to draw every
  task once (an entry's slots fewer than its tasks), or draw one entry's tasks more than ``REPEAT_RATIO_LIMIT``
  times as often as another's; an adaptive sampler's draws follow the outcomes, so its numbers are averages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from platoon.config.effective import core_hands_slots, entry_sampler, run_sampler
from platoon.config.models import RunConfig
from platoon.config.steps import planned_steps

REPEAT_RATIO_LIMIT = 4.0
"""How many times as often one entry's tasks may each be drawn as another entry's before a mixture is warned of."""

_FIX = "weight: tasks on every entry draws every task of the mixture equally often"


@dataclass(frozen=True)
class EntryShare:
    """One environment entry of the plan: its training tasks, its weight as written and its share of the slots."""

    label: str
    tasks: int
    weight: float | str
    share: float


@dataclass(frozen=True)
class SamplingPlan:
    """The entries' shares of a run's ``steps x batch_size`` slots; ``hands`` says how the run's sampler shares them
    (True: by weight, False: over every task, None: its own way)."""

    entries: tuple[EntryShare, ...]
    sampler: str
    hands: bool | None
    steps: int
    batch_size: int
    entry_samplers: Mapping[str, str]

    @property
    def tasks(self) -> int:
        return sum(e.tasks for e in self.entries)

    @property
    def slots(self) -> int:
        return self.steps * self.batch_size

    def draws(self, entry: EntryShare) -> float:
        """How many times each of ``entry``'s tasks is drawn over the run, on average."""
        return entry.share * self.slots / entry.tasks if entry.tasks else 0.0

    def describe(self) -> list[str]:
        """One line for the run, one per entry."""
        span = f"over the run's {self.steps} steps"
        head = f"training tasks: {self.tasks}, {self.slots} slots ({self.steps} steps of {self.batch_size})"
        if self.hands is None:
            return [f"{head}, drawn by {self.sampler}, which shares them its own way",
                    *(f"environments[{e.label}]: {e.tasks} tasks" for e in self.entries)]
        if not self.hands:
            lines = [f"{head}, drawn by {self.sampler} over every entry's tasks"]
            return lines + [f"environments[{e.label}]: {e.tasks} tasks, {e.share:.1%} of the slots: each task drawn "
                            f"about {_number(self.draws(e))} times {span} on average" for e in self.entries]
        lines = [f"{head}, shared by {self.sampler} by weight"]
        for e in self.entries:
            own = self.entry_samplers.get(e.label, "uniform")
            by = "" if own == "uniform" else f", each filled by {own}"
            lines.append(f"environments[{e.label}]: {e.tasks} tasks, weight {_number(e.weight)}, {e.share:.1%} of the "
                         f"slots{by}: each task drawn about {_number(self.draws(e))} times {span}"
                         f"{' on average' if by else ''}")
        return lines

    def warnings(self) -> list[str]:
        """A mixture's weights that leave tasks out of the run, or draw some far more often than others (see the
        module doc); none for one entry or for a sampler that shares the slots its own way."""
        entries = [e for e in self.entries if e.tasks]
        if len(entries) < 2 or self.hands is None:
            return []
        found = []
        if self.slots >= self.tasks:
            for e in entries:
                reached = e.share * self.slots
                if reached < e.tasks:
                    found.append(
                        f"environments[{e.label}]: its weight ({_number(e.weight)}, {e.share:.1%} of the slots) gives "
                        f"it about {reached:.0f} of the run's {self.slots} task slots ({self.steps} steps of "
                        f"{self.batch_size}), fewer than its {e.tasks} training tasks, so about "
                        f"{e.tasks - reached:.0f} of them never train; {_FIX}"
                    )
        most = max(entries, key=lambda e: e.share / e.tasks)
        least = min(entries, key=lambda e: e.share / e.tasks)
        ratio = (most.share / most.tasks) / (least.share / least.tasks) if least.share else math.inf
        if ratio > REPEAT_RATIO_LIMIT:
            found.append(
                f"environments[{most.label}]'s {most.tasks} training tasks are each drawn about {ratio:.1f} times as "
                f"often as environments[{least.label}]'s {least.tasks} (about {_number(self.draws(most))} and "
                f"{_number(self.draws(least))} times each over the run's {self.steps} steps, at weights "
                f"{_number(most.weight)} and {_number(least.weight)}); {_FIX}"
            )
        return found


def sampling_plan(cfg: RunConfig, tasks: Mapping[str, int]) -> SamplingPlan:
    """The plan of ``cfg`` whose entries list ``tasks`` training tasks each (by label)."""
    hands = core_hands_slots(cfg)
    weights = {e.label: float(tasks.get(e.label, 0)) if e.weight == "tasks" else float(e.weight)
               for e in cfg.environments}
    listed = [e.label for e in cfg.environments if tasks.get(e.label)]
    if hands:
        total = sum(weights[label] for label in listed)
        shares = {label: weights[label] / total if total else 0.0 for label in listed}
    else:
        everything = sum(tasks[label] for label in listed)
        shares = {label: tasks[label] / everything for label in listed}
    entries = tuple(EntryShare(e.label, tasks.get(e.label, 0), e.weight, shares.get(e.label, 0.0))
                    for e in cfg.environments)
    own = {e.label: s for i, e in enumerate(cfg.environments) if (s := entry_sampler(cfg, i)) is not None}
    steps = planned_steps(cfg, sum(tasks.values())) or 0
    return SamplingPlan(entries, run_sampler(cfg), hands, steps, cfg.train.batch_size, own)


def _number(value: float | str) -> str:
    """A weight or a count as a config would write it: ``tasks``, ``2``, ``0.5``, ``116.4``."""
    if isinstance(value, str):
        return value
    if math.isclose(value, round(value), rel_tol=0, abs_tol=1e-9):
        return str(round(value))
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"
