"""The horizon: how far ahead of the trainer the dispatcher may draw, and when a step's batch is complete.

What this module owns (docs/dispatch.md, "The horizon"): the counters that drawing, settling and step assembly all
move, and the rules they decide. ``pipeline`` counts the groups dispatched and not yet dequeued (a partly finished
group counts whole), ``admitted`` the groups the current step dequeued toward its batch; ``in_use`` is their sum.

- **Plan and staleness.** Nothing starts when ``in_use >= steps_left * B``; with ``max_staleness = k`` nothing
  starts when ``in_use + held >= (k + 1) * B``, ``held`` being the places kept for capped labels' next groups
  (``platoon.policy.mixture``). Under an admission rule at ``k = 0`` (or in the last step) nothing starts
  once the groups this step counted, the pipeline and this step's rejections reach the step's cap.
- **A step** under ``all`` is complete at ``B`` groups dequeued; under a rule at ``B`` admitted or ``cap`` counted.
  A rejected group with datums frees its place at once and counts toward the current step's cap as a marker; a
  failed group, or one without datums (``held``), keeps its place until a step takes its marker.
- **The stale filter**: at dequeue, an admitted group whose oldest rollout is more than its bound (its entry's, else
  ``max_staleness``) versions behind is stale.
"""

from __future__ import annotations

from collections.abc import Mapping

from platoon.policy.outputs import SettledGroup, SettledKind

COUNTERS = ("pipeline", "admitted", "markers_now", "step_counted", "step_admitted")


class Horizon:
    """See the module docstring. ``rule_mode``: a group admission rule decides (``cap`` is its step cap)."""

    def __init__(self, *, batch_size: int, steps: int, max_staleness: int | None,
                 entry_staleness: Mapping[str, int | None], cap: int, rule_mode: bool) -> None:
        self.batch_size, self.steps, self.max_staleness = batch_size, steps, max_staleness
        self.entry_staleness = entry_staleness
        self.cap, self.rule_mode = cap, rule_mode
        self.pipeline = self.admitted = self.markers_now = self.step_counted = self.step_admitted = 0

    def in_use(self) -> int:
        return self.pipeline + self.admitted

    def room(self, step: int, *, held: int = 0) -> str | None:
        """None when another group may start during ``step``, else why not: ``plan`` or ``horizon``. ``held``:
        the places kept free for capped labels' next groups (they bound staleness, not the plan)."""
        B = self.batch_size
        steps_left = self.steps - step
        in_use = self.pipeline + self.admitted  # ``in_use()``, asked at every dispatch
        if in_use >= steps_left * B:
            return "plan"
        k = self.max_staleness
        if k is not None and in_use + held >= (k + 1) * B:
            return "horizon"
        if self.rule_mode and (k == 0 or steps_left == 1):
            if self.step_counted + self.pipeline + self.markers_now >= self.cap:
                return "plan" if steps_left == 1 else "horizon"
        return None

    # ------------------------------------------------------------------------------------------ transitions
    def reserved(self) -> None:
        """A start reserved its permits: its group holds a place from now on."""
        self.pipeline += 1

    def released(self) -> None:
        """A reservation that started nothing gives its place back."""
        self.pipeline -= 1

    def rejected(self, *, held: bool) -> None:
        """A rule rejected a settled group: one with datums frees its place now and counts as this step's marker."""
        if not held:
            self.pipeline -= 1
            self.markers_now += 1

    def dequeued(self, item: SettledGroup, *, step: int) -> None:
        """A step took ``item`` (its kind decided: admitted, stale, failed or marker)."""
        kind = item.kind
        if not self.rule_mode:
            self.pipeline -= 1
            self.admitted += 1
            self.step_counted += 1
            self.step_admitted += kind == SettledKind.ADMITTED
        elif kind == SettledKind.MARKER:
            if item.held:
                self.pipeline -= 1
            if item.window == step:
                if not item.held:
                    self.markers_now -= 1
                self.step_counted += 1
        else:
            self.pipeline -= 1
            if kind == SettledKind.ADMITTED:
                self.admitted += 1
                self.step_admitted += 1
            self.step_counted += 1

    def step_complete(self) -> bool:
        if not self.rule_mode:
            return self.step_counted >= self.batch_size
        return self.step_admitted >= self.batch_size or self.step_counted >= self.cap

    def published(self) -> None:
        """A new step begins: the last step's groups and rejections no longer count toward anything."""
        self.admitted = self.markers_now = self.step_counted = self.step_admitted = 0

    def is_stale(self, item: SettledGroup, *, version: int) -> bool:
        bound = self.entry_staleness.get(item.entry) if item.entry is not None else None
        if bound is None:
            bound = self.max_staleness
        if bound is None or item.output is None or not len(item.output):
            return False
        oldest = item.record.oldest_version()
        return oldest is not None and version - oldest > bound

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTERS}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        for name in COUNTERS:
            setattr(self, name, int(state[name]))


__all__ = ["Horizon"]
