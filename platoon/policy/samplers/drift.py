"""``pass_rate``'s evidence model (``evidence: drift``): each task's pass rate moves with the policy's progress.

Why: platoon 0.4.0 halves a task's evidence every 32 policy versions, but a task comes round only once every
``pool / (groups per version)`` versions, so by its next draw most of what was learned about it has faded, and the
sampler is back to guessing. Yet most of what changes a task's pass rate while the policy learns is shared: the
policy gets better at everything at once. This model keeps each task's evidence and moves it with a shared drift.

The model, per entry ``e`` of the sampler's pool (tasks outside every entry form one more group):

- a task's pass rate ``p`` has a Beta posterior ``(a, b)`` (prior and evidence, ``a + b`` its strength), *anchored*
  at the entry's drift ``D_e`` at its last update. Read at drift ``D``, its mean moves along the logit,
  ``m -> sigmoid(logit(m) + D - anchor)``, keeping its strength: what was learned about a task stays useful while
  the policy progresses;
- the drift ``D_e`` is a random walk in the logit (variance ``DRIFT_NOISE`` per policy version) that every settled
  group of a task with evidence updates, by how far its passes fell from what the task's posterior expected (an
  extended Kalman step: the surprise of a task known precisely moves the drift more than one known vaguely);
- what the shared drift does not explain (a task learned on its own) fades as the task goes unseen: its evidence
  beyond the prior halves every ``FORGET_ROUNDS`` rounds of the pool (``FORGET_ROUNDS x N`` decisions for ``N``
  tasks): measured against how often a task comes round, not against versions;
- with ``forget_versions`` (an option of ``pass_rate``), that evidence also halves every ``forget_versions`` policy
  versions since it came (discounted evidence: what the policy was, not how long the task went unseen);
- a task without evidence reads the prior ``Beta(w m, w (1 - m))``, ``w = PRIOR_STRENGTH``, centred on the entry's
  recent pass rate ``m``; its first group adds to that;
- a group of passes only (or failures only) trains nothing with a binary reward, but may train with a graded one
  (partial credit differs between rollouts that all failed). The entry's recent share of such groups that came out
  ``uniform`` (``u1`` for all passes, ``u0`` for all failures, each 1 until a group says otherwise) gives the
  chance that a group of ``G`` trains: ``1 - u1 p^G - u0 (1 - p)^G``, which is 0.4.0's ``1 - p^G - (1 - p)^G``
  with a binary reward.

Everything is a deterministic function of the settled groups in draw order and the decision counts (no clock, no
I/O); `state` and `load` carry it across a resume exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PRIOR_STRENGTH = 0.5
"""Weight of a task's prior, in rollouts: its first group decides what it looks like. (The statistics' posterior,
0.4.0's, weighs 2: centred on the entry's pass rate, it made every task look middling, when a population's tasks
are mostly nearly always or nearly never solved.)"""
FORGET_ROUNDS = 16.0
"""A task's evidence beyond its prior halves every this many rounds of the pool (N decisions) it goes unseen."""
DRIFT_NOISE = 1e-3
"""Variance of the drift's random walk per policy version (logit units squared)."""
MIN_EVIDENCE = 4.0
"""Only a task with at least this much evidence (rollouts, beyond the prior) updates the drift."""
_ENTRY_FIELDS = (
    "drift",
    "variance",
    "version",
    "passes",
    "fails",
    "u0_uniform",
    "u0_trained",
    "u1_uniform",
    "u1_trained",
)
_CLIP = 1e-9


def logit(p: np.ndarray | float) -> np.ndarray | float:
    return np.log(p) - np.log1p(-p)


def sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def shift_mean(m: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``sigmoid(logit(m) + delta)``, with ``m`` kept inside (0, 1) so that a mean of 0 or 1 moves too."""
    m = np.clip(m, _CLIP, 1.0 - _CLIP)
    return np.where(delta == 0.0, m, sigmoid(logit(m) + delta))


class DriftModel:
    """The evidence of ``n`` tasks, task ``i`` in group ``codes[i]`` of ``groups`` (its entry's), and each group's
    drift, base rate and graded-reward shares. See the module doc."""

    def __init__(
        self, n: int, codes: np.ndarray, group_names: Sequence[str], group_tasks: np.ndarray,
        forget_versions: float | None = None,
    ) -> None:
        self.n = int(n)
        self.forget_versions = forget_versions
        self.codes = np.asarray(codes, dtype=np.int64)
        self.names = tuple(group_names)
        self.group_tasks = np.asarray(group_tasks, dtype=np.int64)
        # Per-group decay of the base rate and the graded-reward shares: half-life one round of the group's tasks.
        self._group_decay = np.power(2.0, -1.0 / np.maximum(self.group_tasks.astype(float), 1.0))
        self.reset()

    def reset(self) -> None:
        n, g = self.n, len(self.names)
        self.a = np.zeros(n)  # 0: no evidence
        self.b = np.zeros(n)
        self.anchor = np.zeros(n)
        self.stamp = np.zeros(n, dtype=np.int64)  # the clock at the task's last update
        self.vstamp = np.zeros(n)  # the policy version of the task's last update (forget_versions only)
        self.now = 0.0  # the current policy version, as the sampler last read it (forget_versions only)
        self.entries = np.zeros((g, len(_ENTRY_FIELDS)))
        self.entries[:, 2] = -1.0  # no version seen
        self.clock = 0  # decisions made so far (the sampler sets it)

    # -- reads
    def seen(self, idx: np.ndarray) -> np.ndarray:
        return self.a[idx] > 0.0

    def base_rate(self, codes: np.ndarray | int) -> np.ndarray | float:
        """The prior centre ``(1 + P) / (2 + P + F)`` of group ``codes``, from its recent passes and failures."""
        e = self.entries[codes]
        return (1.0 + e[..., 3]) / (2.0 + e[..., 3] + e[..., 4])

    def prior(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(alpha, beta)`` of tasks ``idx`` without evidence."""
        m = self.base_rate(self.codes[idx])
        return PRIOR_STRENGTH * m, PRIOR_STRENGTH * (1.0 - m)

    def uniform_shares(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(u1, u0)``: the chance that a group of all passes (all failures) comes out uniform, per code."""
        e = self.entries[codes]
        return (1.0 + e[:, 7]) / (1.0 + e[:, 7] + e[:, 8]), (1.0 + e[:, 5]) / (1.0 + e[:, 5] + e[:, 6])

    def posterior(self, idx: np.ndarray, clock: int) -> tuple[np.ndarray, np.ndarray]:
        """``(alpha, beta)`` of tasks ``idx`` (each seen) at the current drift, their evidence faded by the rounds
        since it came."""
        a, b = self.a[idx], self.b[idx]
        strength = a + b
        codes = self.codes[idx]
        m = shift_mean(a / strength, self.entries[codes, 0] - self.anchor[idx])
        rounds = (clock - self.stamp[idx]) / max(self.n, 1)
        keep = np.power(2.0, -np.maximum(rounds, 0.0) / FORGET_ROUNDS)
        if self.forget_versions is not None:
            keep = keep * np.power(2.0, -np.maximum(self.now - self.vstamp[idx], 0.0) / self.forget_versions)
        strength = PRIOR_STRENGTH + np.maximum(strength - PRIOR_STRENGTH, 0.0) * keep
        return m * strength, (1.0 - m) * strength

    def summary(self) -> dict[str, float]:
        """``drift`` and ``all_fail_uniform`` (u0), each averaged over the tasks (for the sampler's metrics)."""
        share = self.group_tasks / max(int(self.group_tasks.sum()), 1)
        _, u0 = self.uniform_shares(np.arange(len(self.names)))
        return {"drift": float(share @ self.entries[:, 0]), "all_fail_uniform": float(share @ u0)}

    # -- writes
    def observe(self, i: int, passes: int, valid: int, verdict: str, version: int | None) -> None:
        """Task ``i``'s group settled with ``passes`` of ``valid`` members passing (verdict ``verdict``)."""
        code = int(self.codes[i])
        e = self.entries[code]
        if version is not None:
            self.now = max(self.now, float(version))
        self._note_shares(e, code, passes, valid, verdict)
        if valid <= 0:
            return
        if version is not None and version > e[2]:
            if e[2] >= 0:
                e[1] += DRIFT_NOISE * (version - e[2])
            e[2] = version
        idx = np.array([i])
        if self.a[i] > 0.0:
            alpha, beta = (float(x[0]) for x in self.posterior(idx, self.clock))
            if alpha + beta - PRIOR_STRENGTH >= MIN_EVIDENCE:
                self._update_drift(e, alpha, beta, passes, valid)
            alpha, beta = (float(x[0]) for x in self.posterior(idx, self.clock))
        else:
            alpha, beta = (float(x[0]) for x in self.prior(idx))
        self.a[i], self.b[i] = alpha + passes, beta + (valid - passes)
        self.anchor[i] = e[0]
        self.stamp[i] = self.clock
        self.vstamp[i] = self.now if version is None else float(version)
        d = self._group_decay[code]
        e[3], e[4] = e[3] * d + passes, e[4] * d + (valid - passes)

    def _note_shares(self, e: np.ndarray, code: int, passes: int, valid: int, verdict: str) -> None:
        if valid <= 0 or 0 < passes < valid or verdict not in ("trained", "uniform"):
            return
        d = self._group_decay[code]
        col = 7 if passes == valid else 5  # all passed: u1's counts; all failed: u0's
        e[col] *= d
        e[col + 1] *= d
        e[col + (verdict == "trained")] += 1.0

    @staticmethod
    def _update_drift(e: np.ndarray, alpha: float, beta: float, passes: int, valid: int) -> None:
        """One extended Kalman step of the drift on a group of a task whose posterior is ``Beta(alpha, beta)``."""
        p = min(max(alpha / (alpha + beta), 0.01), 0.99)
        info = valid * p * (1.0 - p)
        surprise = (passes - valid * p) / info  # in logit units
        noise = 1.0 / info + 1.0 / alpha + 1.0 / beta  # the group's noise plus the task's own uncertainty
        gain = e[1] / (e[1] + noise)
        e[0] += gain * surprise
        e[1] *= 1.0 - gain

    # -- state
    def fresh(self) -> bool:
        """Nothing observed and no decision made: the state of a model just built."""
        return (
            self.clock == 0
            and not (self.a > 0.0).any()
            and not (self.entries[:, [0, 1, 3, 4, 5, 6, 7, 8]]).any()
        )

    def state(self, ids: Sequence[str]) -> dict[str, Any]:
        seen = np.flatnonzero(self.a > 0.0)
        versions = self.forget_versions is not None  # the version stamps matter only then
        state: dict[str, Any] = {
            "clock": int(self.clock),
            "entries": {name: [float(x) for x in self.entries[c]] for c, name in enumerate(self.names)},
            "tasks": {
                ids[i]: [float(self.a[i]), float(self.b[i]), float(self.anchor[i]), int(self.stamp[i])]
                + ([float(self.vstamp[i])] if versions else [])
                for i in seen.tolist()
            },
        }
        if versions:
            state["now"] = float(self.now)
        return state

    def load(self, state: Mapping[str, Any], index: Mapping[str, int]) -> None:
        """Load `state` (tasks that left the pool are dropped); ValueError for a malformed one (nothing changes)."""
        if not isinstance(state, Mapping) or not {"clock", "entries", "tasks"} <= set(state) <= {
            "clock", "entries", "tasks", "now"}:
            raise ValueError("pass_rate state: model is {clock, entries, tasks[, now]}")
        now = _floats([state.get("now", 0.0)], 1, "model now")[0]
        clock = state["clock"]
        if isinstance(clock, bool) or not isinstance(clock, int) or clock < 0:
            raise ValueError(f"pass_rate state: model clock is an int >= 0, got {clock!r}")
        entries = np.zeros((len(self.names), len(_ENTRY_FIELDS)))
        entries[:, 2] = -1.0
        raw = state["entries"]
        if not isinstance(raw, Mapping):
            raise ValueError("pass_rate state: model entries is a mapping")
        for name, values in raw.items():
            row = _floats(values, len(_ENTRY_FIELDS), f"model entries[{name!r}]")
            if name in self.names:
                entries[self.names.index(name)] = row
        tasks = state["tasks"]
        if not isinstance(tasks, Mapping):
            raise ValueError("pass_rate state: model tasks is a mapping")
        a, b, anchor, vstamp = np.zeros(self.n), np.zeros(self.n), np.zeros(self.n), np.full(self.n, now)
        stamp = np.zeros(self.n, dtype=np.int64)
        for task, values in tasks.items():
            row = _floats(values, 5 if isinstance(values, list | tuple) and len(values) == 5 else 4,
                          f"model tasks[{task!r}]")
            if row[0] <= 0 or row[1] < 0 or row[3] != int(row[3]) or row[3] < 0:
                raise ValueError(
                    f"pass_rate state: model tasks[{task!r}] is [a > 0, b >= 0, anchor, stamp >= 0]"
                )
            i = index.get(task) if isinstance(task, str) else None
            if i is not None:
                a[i], b[i], anchor[i], stamp[i] = row[0], row[1], row[2], int(row[3])
                vstamp[i] = row[4] if len(row) == 5 else now
        self.a, self.b, self.anchor, self.stamp, self.entries, self.clock = a, b, anchor, stamp, entries, clock
        self.vstamp, self.now = vstamp, now


def _floats(values: Any, size: int, what: str) -> list[float]:
    if not isinstance(values, list | tuple) or len(values) != size:
        raise ValueError(f"pass_rate state: {what} is a list of {size} numbers")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"pass_rate state: {what} holds finite numbers, got {v!r}")
        out.append(float(v))
    return out


def informative_chance(alpha: Any, beta: Any, g: Any, u1: Any, u0: Any) -> Any:
    """``E[1 - u1 p^G - u0 (1 - p)^G]`` for ``p ~ Beta(alpha, beta)``: the chance a group of ``G`` trains."""
    g = np.asarray(g)
    top = int(np.max(g)) if g.size else 0
    pass_all = np.ones_like(np.asarray(alpha, dtype=float))
    fail_all = np.ones_like(pass_all)
    for k in range(top):
        live = k < g
        pass_all = np.where(live, pass_all * ((alpha + k) / (alpha + beta + k)), pass_all)
        fail_all = np.where(live, fail_all * ((beta + k) / (alpha + beta + k)), fail_all)
    return np.maximum(1.0 - u1 * pass_all - u0 * fail_all, 0.0)
