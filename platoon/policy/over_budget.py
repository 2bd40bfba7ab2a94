"""The over-budget warning: more of a workflow's rollouts ran at once than ``train.max_concurrent_rollouts``.

A rollout runs in its lease block on a permit, and the permits are ``max_concurrent_rollouts``; so more rollouts at
once than that means a workflow returned a permit while its rollout still ran: it ran outside its block (a task
that outlived its group's workflow runs on no permit), ran more rollouts than the group size, or an evaluation was
counted in the train scope. ``OverBudgetWatch.note`` takes each step's largest count of rollouts running at once
(``rollout_client/rollouts_in_flight_max``, or a runtime's own count of the rollouts it saw running) and warns once
per start of training (docs/metrics.md).
"""

from __future__ import annotations

__all__ = ["OverBudgetWatch"]


class OverBudgetWatch:
    """Warns once per start when a step's rollouts at once exceed ``budget`` (``max_concurrent_rollouts``)."""

    def __init__(self, budget: int) -> None:
        if budget < 1:
            raise ValueError(f"max_concurrent_rollouts must be at least 1, got {budget}")
        self.budget = budget
        self.warned = False

    def note(self, in_flight_max: float, *, step: int) -> str | None:
        """Step ``step`` had at most ``in_flight_max`` rollouts running at once; the warning, the first time it is
        over the budget."""
        if self.warned or in_flight_max <= self.budget:
            return None
        self.warned = True
        return (f"up to {in_flight_max:g} of the workflow's rollouts ran at once in step {step}, more than "
                f"train.max_concurrent_rollouts ({self.budget}): a workflow returned a permit while its rollout still "
                "ran (it ran outside its lease block, ran more rollouts than the group size, or an evaluation was "
                "counted in the train scope), so more sandboxes and model calls were alive at once than the budget")
