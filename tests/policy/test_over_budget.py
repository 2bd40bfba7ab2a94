"""The over-budget warning: once per start, when a step's rollouts at once exceed max_concurrent_rollouts."""

import pytest

from platoon.policy.over_budget import OverBudgetWatch


def test_it_warns_once_when_the_budget_is_exceeded():
    watch = OverBudgetWatch(8)
    assert watch.note(8.0, step=0) is None  # at the budget is within it
    warning = watch.note(11.0, step=1)
    assert warning is not None and "up to 11 of the workflow's rollouts ran at once in step 1" in warning
    assert "train.max_concurrent_rollouts (8)" in warning
    assert watch.note(20.0, step=2) is None
    with pytest.raises(ValueError):
        OverBudgetWatch(0)
