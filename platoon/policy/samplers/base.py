"""The task sampler API: what a sampler is built with, what it is asked with, and what it may answer.

Owns `Draw`, `Slot`, `EntryInfo`, `SamplerSetup`, `SamplerContext`, `TaskStatsView`, the `Sampler` base class,
`decision_key` and `SamplerError`. It keeps these rules:
- a decision's randomness comes only from its key: ``decision_key(seed, name, decision)``, the first 16 bytes of
  ``sha256(f"{seed}:{name}:{decision}")`` read big-endian, so it depends on no process hash seed and no clock;
- a sampler is asked one synchronous question at a time; its answer is checked by the runtime (`answers.accept`),
  never trusted and never in the answer's constructor: a reason is a non-empty string of at most 64 characters, a
  score None or a finite real (not a bool).
"""

from __future__ import annotations

import hashlib
import math
import numbers
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from platoon.policy.stats import (
    GroupRecord,
    GroupTotals,
    TaskCountArrays,
    TaskCounts,
    TaskStats,
    TaskStatsStore,
)

MAX_REASON_LENGTH = 64
LEVELS = ("run", "entry")


class SamplerError(RuntimeError):
    """A core sampler failed (raised, or gave an answer it may not give): the run cannot go on."""


def decision_key(seed: int, name: str, decision: int) -> int:
    """``int.from_bytes(sha256(f"{seed}:{name}:{decision}").digest()[:16], "big")``: a 128-bit key."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}:{decision}".encode()).digest()[:16], "big")


def check_reason(reason: object) -> str:
    """The reason itself, or ValueError unless it is a non-empty string of at most 64 characters."""
    if not isinstance(reason, str) or not reason or len(reason) > MAX_REASON_LENGTH:
        raise ValueError(
            f"a draw's reason is a non-empty string of at most {MAX_REASON_LENGTH} characters, got {reason!r}"
        )
    return reason


def check_score(score: object) -> float | None:
    """The score as a float (or None), or ValueError unless it is None or a finite real number (not a bool)."""
    if score is None:
        return None
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(float(score)):
        raise ValueError(f"a draw's score is None or a finite number, got {score!r}")
    return float(score)


@dataclass(frozen=True)
class Draw:
    """A sampler's answer: draw ``task_id`` (the first pool row with that id), saying why and how it scored it.

    Built as given: the runtime judges it when it accepts the answer (``answers.accept``), so a reason or a score
    that cannot be recorded is refused there, with the decision's fallback, never raised inside the sampler's
    ``next`` (as platoon 0.4.0 does)."""

    task_id: str
    reason: str = "order"
    score: float | None = None


@dataclass(frozen=True)
class Slot:
    """A static run sampler's answer that hands the draw to entry ``entry``'s own sampler (``entry_slots`` only)."""

    entry: str


@dataclass(frozen=True)
class Row:
    """Core's answer by pool row: ``index`` into ``setup.task_ids`` (so a repeated id is drawn row by row)."""

    index: int
    reason: str = "order"
    score: float | None = None


@dataclass(frozen=True)
class EntryInfo:
    """An environment entry with training tasks. ``weight`` is a float (``weight: tasks`` becomes its number of
    tasks; None, as a test may leave it, reads as that number too); ``index`` is its place among the entries that
    have training tasks. The defaults are platoon 0.4.0's; the runtime always fills every field."""

    group_size: int
    success_threshold: float = 1.0
    name: str | None = None
    weight: float | None = None
    seed: int = 0
    index: int | None = None
    task_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class SamplerSetup:
    """What a sampler is built with, once per process start: ``Class(setup, options)``.

    ``name`` is the qualified name (``pass_rate``, ``pkg.mod:Cls``, ``<name>@<entry>``); ``level`` is ``run`` or
    ``entry``; ``task_ids`` the sampler's pool in listing order (the entry's tasks at entry level); ``entries`` the
    entries that have training tasks, in config order; ``seed`` is the run's ``train.seed``, plus the entry's
    ``seed`` at entry level, plus the options' integer ``seed``: the seed of the sampler's decision keys.
    """

    name: str
    level: str
    entry: str | None
    task_ids: tuple[str, ...]
    entries: Mapping[str, EntryInfo]
    batch_size: int
    label_column: str = "_platoon_environment"
    seed: int = 0

    @cached_property
    def unique_ids(self) -> tuple[str, ...]:
        """The pool's distinct task ids in listing order (the same tuple every time)."""
        return tuple(dict.fromkeys(self.task_ids))

    @cached_property
    def first_index(self) -> dict[str, int]:
        """Task id -> index of its first row in ``task_ids``."""
        if len(self.unique_ids) == len(self.task_ids):  # distinct ids (the usual pool): every row is its id's first
            return dict(zip(self.task_ids, range(len(self.task_ids)), strict=True))
        out: dict[str, int] = {}
        for i, t in enumerate(self.task_ids):
            out.setdefault(t, i)
        return out


class TaskStatsView:
    """A read-only view of the per-task statistics at policy version ``now``.

    ``live`` is False when the statistics stopped (the view reads what they held) or never started (an empty
    store). ``counts`` is the cheap per-task read; ``task`` builds a full `TaskStats` copy. The vectorised reads
    ``count_arrays(ids)`` and ``posterior_arrays(ids, subset=None)`` answer for many tasks at once, and the sparse
    ``outstanding_tasks(ids)`` and ``without_evidence(ids)`` list the few tasks with draws outstanding or without
    evidence; pass the same ids tuple each time (e.g. ``setup.unique_ids``), which the store caches by identity.
    """

    __slots__ = ("_store", "_now", "_live")

    def __init__(self, store: TaskStatsStore, now: float, live: bool = True) -> None:
        self._store = store
        self._now = now
        self._live = bool(live)

    @property
    def now(self) -> float:
        return self._now

    @property
    def live(self) -> bool:
        return self._live

    def task_ids(self) -> tuple[str, ...]:
        return self._store.ids

    def counts(self, task_id: str) -> TaskCounts:
        """``TaskCounts(groups, outstanding, drawn, uniform_streak, no_evidence_streak, evidence_version)``."""
        return self._store.counts(task_id)

    def task(self, task_id: str) -> TaskStats:
        return self._store.task(task_id)

    def posterior(self, task_id: str) -> tuple[float, float]:
        """``(alpha, beta)`` of the task's pass rate at ``now`` (see `TaskStatsStore.posterior`)."""
        return self._store.posterior(task_id, self._now)

    def entry(self, name: str) -> GroupTotals:
        return self._store.entry_totals[name].copy()

    def label(self, label: str) -> GroupTotals:
        return self._store.label_totals[label].copy()

    def run(self) -> GroupTotals:
        return self._store.run.copy()

    def labels(self) -> tuple[str, ...]:
        return tuple(self._store.label_totals)

    def group_size(self, entry: str | None) -> int:
        return self._store.group_size(entry)

    def threshold(self, entry: str | None) -> float:
        return self._store.threshold(entry)

    def count_arrays(self, task_ids: Sequence[str]) -> TaskCountArrays:
        return self._store.count_arrays(task_ids)

    def outstanding_tasks(self, task_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indices into task_ids, outstanding, groups)`` of the tasks with draws outstanding (sparse)."""
        return self._store.outstanding_tasks(task_ids)

    def without_evidence(self, task_ids: Sequence[str]) -> np.ndarray:
        """Indices into ``task_ids`` of the tasks without evidence (``no_evidence_streak >= 3``; sparse)."""
        return self._store.without_evidence(task_ids)

    def posterior_arrays(
        self, task_ids: Sequence[str], subset: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        return self._store.posterior_arrays(task_ids, self._now, subset)


class SamplerContext:
    """One decision's question (a sampler must not keep it).

    ``task_ids`` is the sampler's whole pool, never a filtered list; ``decision`` its 0-based count; ``key`` the
    decision key; ``eligible(task_id)`` whether a task may be drawn now; ``stats`` a `TaskStatsView` for an adaptive
    sampler, None for a static one; ``step`` the committed training steps; ``versions`` ``{"main": version}``.
    The fields may be given by position in that order (as 0.4.0's dataclass takes them) or by name.
    ``rng`` is a ``random.Random(key)`` built on first use. ``eligible_mask(ids)`` gives the eligibility of many
    tasks at once as a read-only numpy bool array (the runtime precomputes it for ``setup.unique_ids``).
    """

    __slots__ = (
        "task_ids",
        "entry",
        "decision",
        "key",
        "eligible",
        "stats",
        "step",
        "versions",
        "_rng",
        "_mask",
    )

    def __init__(
        self,
        task_ids: Sequence[str],
        entry: str | None,
        decision: int,
        key: int,
        eligible: Callable[[str], bool],
        stats: TaskStatsView | None = None,
        step: int = 0,
        versions: Mapping[str, int] | None = None,
        mask: tuple[Sequence[str], np.ndarray] | None = None,
    ) -> None:
        self.task_ids = task_ids
        self.entry = entry
        self.decision = decision
        self.key = key
        self.eligible = eligible
        self.stats = stats
        self.step = step
        self.versions = dict(versions or {})
        self._rng: random.Random | None = None
        self._mask = mask

    @property
    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random(self.key)
        return self._rng

    def eligible_mask(self, task_ids: Sequence[str]) -> np.ndarray:
        """``[eligible(t) for t in task_ids]`` as a read-only bool array; O(1) for the runtime's precomputed ids."""
        if self._mask is not None and self._mask[0] is task_ids:
            return self._mask[1]
        out = np.fromiter((bool(self.eligible(t)) for t in task_ids), dtype=bool, count=len(task_ids))
        out.flags.writeable = False
        return out


class Sampler:
    """Base class of task samplers: ``Class(setup, options)``, then one synchronous ``next(ctx)`` per decision.

    Class attributes: ``adaptive`` (reads the statistics and is asked only when a group can start), ``entry_slots``
    (a static run sampler that hands slots to entries' samplers), ``options_schema`` (a dataclass, a pydantic model,
    a parsing function raising ValueError, or None: no options).

    ``next(ctx)`` returns a `Draw` or a pool task id (eligible, for an adaptive sampler), a `Slot` (``entry_slots``
    only), or None, only when nothing is eligible; its randomness comes from ``ctx.rng`` or ``ctx.key``. A static
    sampler answers as a function of ``ctx.decision`` (and its own state). ``observe(group)`` gets an adaptive
    sampler's settled groups in draw order (it must also work if never called). ``state_dict`` is JSON data with
    string keys; ``load_state_dict`` raises ValueError on a state that does not fit. ``metrics(stats)`` is called
    once per step and returns finite numbers by name. ``check(options, ctx)`` is the load-time check (ValueError
    refuses the config).
    """

    adaptive: bool = False
    entry_slots: bool = False
    options_schema: Any = None

    def __init__(self, setup: SamplerSetup, options: Any = None) -> None:
        self.setup = setup
        self.options = options

    def next(self, ctx: SamplerContext) -> Draw | Slot | str | None:
        raise NotImplementedError(f"{type(self).__name__}.next")

    def observe(self, group: GroupRecord) -> None:
        """A settled group of this sampler's pool, in draw order (adaptive samplers; the base does nothing)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or state:
            raise ValueError(f"{type(self).__name__} keeps no state, got {state!r}")

    def metrics(self, stats: TaskStatsView | None) -> Mapping[str, float]:
        return {}

    def loss_weight(self, task_id: str) -> float:
        """The weight the loss of a trained group of ``task_id`` should get, now (optional; 1: the draw stands for
        itself). A sampler that draws off its target distribution answers ``target share / its own share`` (capped),
        so that the policy gradient is that of the target's draws; the runtime scales a step's trained groups'
        weights to mean 1 (`SamplerSet.loss_weights`)."""
        return 1.0

    @staticmethod
    def check(options: Any, ctx: Any) -> None:
        return None

    def warn(self, message: str) -> None:
        """A warning for the run's log (the runtime drains it after each call; a message is logged once)."""
        self.__dict__.setdefault("_platoon_warnings", []).append(str(message))


@runtime_checkable
class TaskSampler(Protocol):
    """What the runtime calls of a sampler, whatever its base class: a duck-typed class with ``adaptive``,
    ``next(ctx)``, ``state_dict()`` and ``load_state_dict(state)`` passes ``isinstance(x, TaskSampler)`` (a runtime
    check of those names only). `Sampler` is the optional base class that supplies the rest (``entry_slots``,
    ``options_schema``, ``observe``, ``metrics``, ``check``)."""

    adaptive: ClassVar[bool]

    def next(self, ctx: SamplerContext) -> Draw | Slot | str | None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

__all__ = [
    "LEVELS",
    "MAX_REASON_LENGTH",
    "Draw",
    "EntryInfo",
    "Row",
    "Sampler",
    "SamplerContext",
    "SamplerError",
    "SamplerSetup",
    "Slot",
    "TaskSampler",
    "TaskStatsView",
    "check_reason",
    "check_score",
    "decision_key",
]
