"""The step metrics a driver computes beside the dispatcher's: the step's window and the batch it trained.

Names and meanings are those of docs/metrics.md; both runtimes write them, each on its own clock (simulated or
wall seconds since the start):

- ``train/trainer_idle_share``: the share of the window in which the trainer waited for a batch (from a step's
  publish to the next step's ``take_step``), not training, evaluating or publishing.
- ``train/rollouts``, ``train/rollouts_per_hour``: rollouts that ran to their end (passed, failed or raised) in the
  window, and per hour of the window.
- ``train/wasted_rollouts/{stale,rejected,failed,cancelled}``: rollouts that ran for nothing: members of the groups
  the step dropped as stale, of groups an admission rule rejected and of groups that failed (members that ran to
  their end), and rollouts cancelled while they ran (a failing group's others, straggler cuts).
- ``train/reward_mean``, ``train/pass_rate``, ``train/informative_share``: over the groups the step trained (valid
  members; a member passes at its entry's success threshold; informative: verdict ``trained``).
- ``train/staleness/<k>``: groups the step dequeued (trained or stale) whose oldest rollout was ``k`` versions
  behind, for ``k`` from 0 to the staleness bound + 1 (or the largest seen); ``train/staleness_mean``: the mean lag
  of the groups it trained.
"""

from __future__ import annotations

from collections.abc import Callable

from platoon.policy.outputs import TrainStep

WASTE = ("stale", "rejected", "failed", "cancelled")


class StepWindow:
    """Running sums of one step's window, read (and reset) once per step."""

    def __init__(self, now: float = 0.0) -> None:
        self.start = now
        self.idle_since: float | None = now
        self.idle_area = 0.0
        self.rollouts = 0
        self.wasted = dict.fromkeys(WASTE, 0)

    def rollout_ended(self) -> None:
        self.rollouts += 1

    def waste(self, kind: str, rollouts: int) -> None:
        self.wasted[kind] += rollouts

    def trainer_busy(self, *, now: float) -> None:
        if self.idle_since is not None:
            self.idle_area += now - self.idle_since
            self.idle_since = None

    def trainer_idle(self, *, now: float) -> None:
        self.idle_since = now

    def read(self, *, now: float) -> dict[str, float]:
        """The window's metrics; a new window starts at ``now``."""
        span = now - self.start
        idle = self.idle_area + (now - self.idle_since if self.idle_since is not None else 0.0)
        out = {
            "train/trainer_idle_share": idle / span if span > 0 else 0.0,
            "train/rollouts": float(self.rollouts),
            "train/rollouts_per_hour": self.rollouts * 3600.0 / span if span > 0 else 0.0,
        }
        out.update({f"train/wasted_rollouts/{k}": float(n) for k, n in self.wasted.items()})
        self.start, self.idle_area, self.rollouts = now, 0.0, 0
        if self.idle_since is not None:
            self.idle_since = now
        self.wasted = dict.fromkeys(WASTE, 0)
        return out

    def state_dict(self) -> list:
        return [self.start, self.idle_since, self.idle_area, self.rollouts, dict(self.wasted)]

    def load_state_dict(self, state: list) -> None:
        self.start, self.idle_since, self.idle_area, self.rollouts, wasted = state
        self.wasted = {k: int(wasted[k]) for k in WASTE}


def batch_metrics(step: TrainStep, threshold: Callable[[str | None], float], *,
                  bound: int | None) -> dict[str, float]:
    """Reward, pass rate, informative share and staleness of what ``step`` trained (see the module docstring)."""
    rewards: list[float] = []
    passes = valid = 0
    for g in step.groups:
        t = threshold(g.entry)
        for m in g.record.members:
            if m.valid:
                valid += 1
                passes += m.passes(t)
                if m.reward is not None:
                    rewards.append(float(m.reward))
    groups = len(step.groups)
    informative = sum(1 for g in step.groups if g.output is not None and g.output.verdict == "trained")
    out = {"train/reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
           "train/pass_rate": passes / valid if valid else 0.0,
           "train/informative_share": informative / groups if groups else 0.0}
    out.update(staleness_metrics(step, bound=bound))
    return out


def staleness_metrics(step: TrainStep, *, bound: int | None) -> dict[str, float]:
    """``train/staleness/<k>`` and ``train/staleness_mean`` (see the module docstring)."""
    lags: dict[int, int] = {}
    trained: list[int] = []
    for groups, is_trained in ((step.groups, True), (step.stale, False)):
        for g in groups:
            oldest = g.record.oldest_version()
            lag = step.version - oldest if oldest is not None else 0
            lags[lag] = lags.get(lag, 0) + 1
            if is_trained:
                trained.append(lag)
    top = max([*lags, (bound + 1) if bound is not None else 0])
    out = {f"train/staleness/{k}": float(lags.get(k, 0)) for k in range(top + 1)}
    out["train/staleness_mean"] = sum(trained) / len(trained) if trained else 0.0
    return out


__all__ = ["StepWindow", "WASTE", "batch_metrics", "staleness_metrics"]
