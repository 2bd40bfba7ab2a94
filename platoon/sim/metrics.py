"""The simulator's own step metrics (``sim/...``), kept as running sums over one step's window: nothing per rollout.

Names and meanings:

- ``sim/permit_busy_share``: the time-weighted rollouts at work (from a permit's grant to its block's exit, so a
  teardown that holds the permit counts) over ``max_concurrent_rollouts``; ``sim/permit_idle_share`` is one less it.
  Under ``permit_release: group`` a group holds its permits until its slowest rollout ends, and the permits of its
  finished rollouts sit idle: with G exponential rollouts the busy share is ``1 / H_G`` when permits bind.
- ``sim/trainer_idle_share``: the share of the window the trainer waited for a batch (not training or publishing).
- ``sim/wasted_rollouts/{stale,rejected,failed,cancelled}``: rollouts that ran for nothing, by their group's fate:
  dropped as stale by this step, rejected by an admission rule, in a group that failed (a rollout raised), and
  rollouts cancelled while they ran (a failing group's others, straggler cuts).
- ``sim/rollouts``, ``sim/rollouts_per_hour``: rollouts that ended in the window, and per simulated hour.
- ``sim/staleness/<k>``: groups the step dequeued (trained or stale) whose oldest rollout was ``k`` versions behind;
  ``sim/staleness_mean``: the mean lag of the groups it trained.
- ``sim/simulated_seconds``, ``sim/gpu_hours`` (simulated hours x ``sim.gpus``): cumulative.
"""

from __future__ import annotations

from collections.abc import Sequence

from platoon.policy.outputs import TrainStep

FATES = ("stale", "rejected", "failed", "cancelled")


class Window:
    """Running sums of one step's window, read (and reset) once per step."""

    def __init__(self, now: float) -> None:
        self.start = now
        self.n_busy = 0
        self.busy_t = now
        self.busy_area = 0.0
        self.rollouts = 0
        self.wasted = dict.fromkeys(FATES, 0)
        self.idle_since: float | None = now
        self.idle_area = 0.0

    def busy(self, delta: int, now: float) -> None:
        self.busy_area += self.n_busy * (now - self.busy_t)
        self.busy_t = now
        self.n_busy += delta

    def trainer_busy(self, now: float) -> None:
        if self.idle_since is not None:
            self.idle_area += now - self.idle_since
            self.idle_since = None

    def trainer_idle(self, now: float) -> None:
        self.idle_since = now

    def read(self, now: float, *, permits: int) -> dict[str, float]:
        """The window's metrics; a new window starts at ``now``."""
        self.busy(0, now)
        idle = self.idle_area + (now - self.idle_since if self.idle_since is not None else 0.0)
        span = now - self.start
        busy = self.busy_area / (span * permits) if span > 0 else 0.0
        out = {
            "sim/permit_busy_share": busy,
            "sim/permit_idle_share": 1.0 - busy,
            "sim/trainer_idle_share": idle / span if span > 0 else 0.0,
            "sim/rollouts": float(self.rollouts),
            "sim/rollouts_per_hour": self.rollouts * 3600.0 / span if span > 0 else 0.0,
        }
        out.update({f"sim/wasted_rollouts/{f}": float(n) for f, n in self.wasted.items()})
        self.start, self.busy_area, self.rollouts, self.idle_area = now, 0.0, 0, 0.0
        if self.idle_since is not None:
            self.idle_since = now
        self.wasted = dict.fromkeys(FATES, 0)
        return out

    def state_dict(self) -> list:
        return [self.start, self.n_busy, self.busy_t, self.busy_area, self.rollouts, dict(self.wasted),
                self.idle_since, self.idle_area]

    def load_state_dict(self, s: Sequence) -> None:
        (self.start, self.n_busy, self.busy_t, self.busy_area, self.rollouts, wasted, self.idle_since,
         self.idle_area) = s
        self.wasted = {f: int(wasted[f]) for f in FATES}


def staleness_metrics(step: TrainStep, *, bound: int | None) -> dict[str, float]:
    """``sim/staleness/<k>`` for k from 0 to the staleness bound + 1 (or the largest seen), and the trained mean."""
    lags: dict[int, int] = {}
    trained = []
    for groups, is_trained in ((step.groups, True), (step.stale, False)):
        for g in groups:
            oldest = g.record.oldest_version()
            lag = step.version - oldest if oldest is not None else 0
            lags[lag] = lags.get(lag, 0) + 1
            if is_trained:
                trained.append(lag)
    top = max([*lags, (bound + 1) if bound is not None else 0])
    out = {f"sim/staleness/{k}": float(lags.get(k, 0)) for k in range(top + 1)}
    out["sim/staleness_mean"] = sum(trained) / len(trained) if trained else 0.0
    return out


__all__ = ["FATES", "Window", "staleness_metrics"]
