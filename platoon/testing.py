"""Contract checkers a plug-in author runs in their own tests.

- ``check_task_sampler(sampler, *, options=None, levels=("entry", "run"), budget_ms=20.0)``: a task sampler (a
  class, a registered name or ``module:Class``) against the task sampler contract; raises AssertionError listing
  every failed check by name with what it saw.
"""

from platoon._checks.samplers import check_task_sampler

__all__ = ["check_task_sampler"]

# -- group admission ------------------------------------------------------------------------------------------------
# ``check_group_admission(rule, *, options=None, levels=("run", "entry"), budget_ms=2.0)``: a group admission rule
# against its contract (protocol, options, answers, pure, fast).
from platoon._checks.admission import check_group_admission  # noqa: E402

__all__ += ["check_group_admission"]
