"""The workload's random outcomes: durations, pass/fail, errors, as pure functions of the seed and a rollout's place.

Rules it keeps:

- **No shared stream.** Every random number of a rollout comes from a generator seeded with ``(run seed, group key
  start, group key seq, salt)`` (numpy ``default_rng``), which draws the same fixed-shape arrays for the whole group;
  member ``i`` reads column ``i``. So a rollout's outcome depends on the seed, its group's key and its index, never
  on the order in which anything completed, and an exact resume recomputes what a group in flight has not used yet.
- **Coupled outcomes.** A member passes when its uniform ``u_pass < p``, with ``p`` its task's pass rate when it
  starts: raising ``p`` (learning) turns failures into passes, never the other way round, for the same seed.
- Durations are inverse transforms of the member's uniforms and normals: fixed ``value_s``; exponential
  ``-mean_s * log(1 - u)``; lognormal ``median_s * exp(sigma * z)``; empirical ``values[floor(u * n)]``.
- Turns (``rollout.turns``): a member's passing and failing turn counts are read off one uniform (``values[floor(u *
  n)]`` of each list), so a member that learning turns from failing to passing takes the passing count of the same
  draw; its environment steps come from a second generator (salt ``SALT_ENV_STEPS``, drawn only in turns mode with
  ``env_step_s``), one column per turn up to the group's longest; it raises (``error_rate``) at the end of turn
  ``1 + floor(u * turns)``.

One generator per group costs about 15 microseconds, a few per rollout at the usual group sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from platoon.config.sim import (
    EmpiricalDuration,
    ExponentialDuration,
    FixedDuration,
    LognormalDuration,
    SimRolloutConfig,
)
from platoon.config.sim_files import read_durations

SALT_ROLLOUT = 0x0510_0001
"""The salt of a group's rollout outcomes (other streams of the simulator use other salts)."""
SALT_ENV_STEPS = 0x0510_0002
"""The salt of a group's environment steps (turns mode)."""
_U_ROWS = 8  # pass, invalid, error, error_at, duration, first_call, teardown, turns
_Z_ROWS = 3  # duration, first_call, teardown


def seed_word(seed: int) -> int:
    """A run seed as a non-negative word for numpy's seed sequences (negative seeds wrap around 2**64)."""
    return int(seed) % (1 << 64)


class DurationDist:
    """A duration distribution as a vectorised function of a uniform ``u`` and a normal ``z`` per member."""

    def __init__(self, cfg: FixedDuration | ExponentialDuration | LognormalDuration | EmpiricalDuration) -> None:
        self.cfg = cfg
        self.values: np.ndarray | None = None
        if isinstance(cfg, EmpiricalDuration):
            raw = cfg.values if cfg.values is not None else read_durations(cfg.file or "")
            self.values = np.asarray(raw, dtype=float)

    def __call__(self, u: np.ndarray, z: np.ndarray) -> np.ndarray:
        c = self.cfg
        if isinstance(c, FixedDuration):
            return np.full(u.shape, float(c.value_s))
        if isinstance(c, ExponentialDuration):
            return -c.mean_s * np.log1p(-u)
        if isinstance(c, LognormalDuration):
            return c.median_s * np.exp(c.sigma * z)
        assert self.values is not None
        idx = np.minimum((u * len(self.values)).astype(np.int64), len(self.values) - 1)
        return self.values[idx]

    def mean(self) -> float:
        """The distribution's mean in seconds (for docs, presets and closed-form checks)."""
        c = self.cfg
        if isinstance(c, FixedDuration):
            return float(c.value_s)
        if isinstance(c, ExponentialDuration):
            return float(c.mean_s)
        if isinstance(c, LognormalDuration):
            return float(c.median_s * math.exp(c.sigma**2 / 2))
        assert self.values is not None
        return float(self.values.mean())


class MemberOutcome(NamedTuple):
    """What one rollout will do, decided when it gets its permit (its task's pass rate ``p`` then).

    ``first_call_s``: start-up work before its first model call; ``run_s``: from the first call to its end (its
    task's length applied); ``error_at_s``: when it raises, after its first call (None: it does not);
    ``teardown_s``: background teardown after it ends. In turns mode (``turns`` > 0) ``run_s`` and ``error_at_s``
    are unused: the rollout makes ``turns`` model calls, each followed by the environment step ``env_steps[k]``
    (empty: none), and raises at the end of turn ``error_turn`` (None: it does not). A named tuple, not a frozen
    dataclass: one is built for every rollout.
    """

    passed: bool
    valid: bool
    first_call_s: float
    run_s: float
    error_at_s: float | None
    teardown_s: float
    turns: int = 0
    env_steps: tuple[float, ...] = ()
    error_turn: int | None = None


class Workload:
    """An entry's rollout model (``sim.rollout`` with the entry's overrides merged in)."""

    def __init__(self, cfg: SimRolloutConfig) -> None:
        self.cfg = cfg
        self.duration = DurationDist(cfg.duration)
        self.fail_duration = DurationDist(cfg.fail_duration) if cfg.fail_duration is not None else self.duration
        self.first_call = DurationDist(cfg.first_call_s) if cfg.first_call_s is not None else None
        self.teardown = DurationDist(cfg.teardown_s) if cfg.teardown_s is not None else None
        self.turns = (TurnDist(cfg.turns.passing), TurnDist(cfg.turns.failing)) if cfg.turns is not None else None
        self.env_step = DurationDist(cfg.env_step_s) if cfg.env_step_s is not None else None

    def group(self, seed: int, key: tuple[int, int], size: int, length: float) -> GroupDraws:
        """The random draws of group ``key`` (``size`` members, its task's ``length`` multiplier)."""
        rng = np.random.default_rng([seed_word(seed), int(key[0]), int(key[1]), SALT_ROLLOUT])
        u = rng.random((_U_ROWS, size))
        z = rng.standard_normal((_Z_ROWS, size))
        c = self.cfg
        passed_run = self.duration(u[4], z[0]) * length
        failed_run = (self.fail_duration(u[4], z[0]) * length if self.fail_duration is not self.duration
                      else passed_run)
        first = self.first_call(u[5], z[1]) if self.first_call is not None else np.zeros(size)
        teardown = self.teardown(u[6], z[2]) if self.teardown is not None else np.zeros(size)
        return GroupDraws(
            u_pass=u[0].tolist(),
            invalid=(u[1] < c.invalid_rate).tolist(),
            error=(u[2] < c.error_rate).tolist(),
            error_frac=u[3].tolist(),
            passed_run_s=passed_run.tolist(),
            failed_run_s=failed_run.tolist(),
            first_call_s=first.tolist(),
            teardown_s=teardown.tolist(),
            timeout_s=c.timeout_s,
            turns=self._turns(seed, key, u[7], length),
        )

    def _turns(self, seed: int, key: tuple[int, int], u: np.ndarray, length: float) -> TurnDraws | None:
        if self.turns is None:
            return None
        passing, failing = self.turns[0](u), self.turns[1](u)
        steps: list[list[float]] = [[] for _ in range(len(u))]
        if self.env_step is not None:
            longest = int(max(passing.max(), failing.max()))
            rng = np.random.default_rng([seed_word(seed), int(key[0]), int(key[1]), SALT_ENV_STEPS])
            shape = (len(u), longest)
            steps = (self.env_step(rng.random(shape), rng.standard_normal(shape)) * length).tolist()
        return TurnDraws(passing.tolist(), failing.tolist(), steps)


class TurnDist:
    """A turn count, fixed or drawn from a list, as a vectorised function of a uniform per member."""

    def __init__(self, count: int | list[int]) -> None:
        self.values = np.asarray(count if isinstance(count, list) else [count], dtype=np.int64)

    def __call__(self, u: np.ndarray) -> np.ndarray:
        return self.values[np.minimum((u * len(self.values)).astype(np.int64), len(self.values) - 1)]

    def mean(self) -> float:
        return float(self.values.mean())


@dataclass(frozen=True)
class TurnDraws:
    """A group's turn draws: each member's passing and failing turn counts, and its environment steps (a row per
    member, as long as the group's longest count; empty rows without ``env_step_s``)."""

    passing: list[int]
    failing: list[int]
    env_steps: list[list[float]]


@dataclass(frozen=True)
class GroupDraws:
    """A group's draws, one list entry per member (see the module docstring)."""

    u_pass: list[float]
    invalid: list[bool]
    error: list[bool]
    error_frac: list[float]
    passed_run_s: list[float]
    failed_run_s: list[float]
    first_call_s: list[float]
    teardown_s: list[float]
    timeout_s: float | None = None
    turns: TurnDraws | None = None

    def member(self, index: int, pass_rate: float) -> MemberOutcome:
        """Member ``index``'s rollout when its task's pass rate is ``pass_rate`` (one that reaches the time limit
        ends there, failing; in turns mode the runtime keeps that limit, the length of the turns not being known)."""
        passed = self.u_pass[index] < pass_rate
        if self.turns is not None:
            return self._turns_member(index, passed)
        run_s = self.passed_run_s[index] if passed else self.failed_run_s[index]
        if self.timeout_s is not None and run_s >= self.timeout_s:
            passed, run_s = False, self.timeout_s
        error_at = self.error_frac[index] * run_s if self.error[index] else None
        return MemberOutcome(passed, not self.invalid[index], self.first_call_s[index], run_s, error_at,
                      self.teardown_s[index])

    def _turns_member(self, index: int, passed: bool) -> MemberOutcome:
        t = self.turns
        assert t is not None
        turns = t.passing[index] if passed else t.failing[index]
        error_turn = min(turns, 1 + int(self.error_frac[index] * turns)) if self.error[index] else None
        return MemberOutcome(passed, not self.invalid[index], self.first_call_s[index], 0.0, None,
                             self.teardown_s[index], turns, tuple(t.env_steps[index][:turns]), error_turn)


__all__ = ["DurationDist", "GroupDraws", "MemberOutcome", "SALT_ENV_STEPS", "SALT_ROLLOUT", "TurnDist", "TurnDraws",
           "Workload", "read_durations", "seed_word"]
