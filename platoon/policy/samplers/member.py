"""`SamplerSpec` and `Member`: one sampler of a `SamplerSet` as it is handed over, and what the set keeps and
precomputes for it: its eligibility masks, its warnings, its own metrics.

Rules it keeps: a spec arrives resolved (its class found and its options parsed above the policy layer, in
``platoon.components``); a member builds its sampler from the spec alone, so a restore's ``fresh()`` is the same
sampler the start built; a failure is warned about once per member and kind; eligibility depends on a task's label
and group size only, so a mask is computed once per pattern of eligible (label, group size) classes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from platoon.policy.pool import TaskPool
from platoon.policy.samplers.base import Sampler, SamplerContext, SamplerSetup, TaskStatsView, decision_key
from platoon.policy.samplers.core import is_core, options_seed
from platoon.policy.samplers.metrics import RUN_PREFIX, clean_metrics, entry_prefix


@dataclass(frozen=True)
class SamplerSpec:
    """One resolved sampler as the policy layer receives it: the reference as configured (``auto`` for the run's
    default), the class it names and its options as the class's ``options_schema`` parsed them."""

    ref: str
    cls: type
    options: Any


class Member:
    """One sampler of a `SamplerSet`: its class, parsed ``options``, setup, instance and decision count, with what the
    runtime precomputes over its pool: each row's distinct-id index, each id's label and group size (of its first
    row), so that eligibility is one numpy gather per decision."""

    def __init__(
        self,
        name: str,
        cls: type,
        options: Any,
        *,
        level: str,
        entry: str | None,
        rows: Sequence[int],
        pool: TaskPool,
        batch_size: int,
        seed: int,
        warnings: list[str] | None = None,
    ) -> None:
        self.name, self.cls = name, cls
        self.warnings: list[str] = [] if warnings is None else warnings
        """The outbox a warning goes to (its `SamplerSet`'s, shared by its members)."""
        self.options = options
        self.setup = SamplerSetup(
            name=name,
            level=level,
            entry=entry,
            task_ids=tuple(pool.rows[i].task_id for i in rows),
            entries=dict(pool.entries),
            batch_size=int(batch_size),
            label_column=pool.label_column,
            seed=int(seed) + options_seed(self.options),
        )
        self.rows = tuple(rows)
        self.level, self.entry = self.setup.level, self.setup.entry
        self.core = is_core(cls)
        self.adaptive = bool(cls.adaptive)
        self.slots = bool(getattr(cls, "entry_slots", False))
        self.overrides_observe = getattr(cls, "observe", None) not in (None, Sampler.observe)
        self.decisions = 0
        self.fallbacks = 0
        self.failures_seen: set[str] = set()
        self.prefix = RUN_PREFIX if self.level == "run" else entry_prefix(self.entry or "")
        self.sampler = self.fresh()
        uids = self.setup.unique_ids
        if len(uids) == len(rows):  # distinct ids: row i is id i
            self.uid_of_row = np.arange(len(rows), dtype=np.int64)
        else:
            uid_pos = {t: i for i, t in enumerate(uids)}
            self.uid_of_row = np.fromiter(
                (uid_pos[t] for t in self.setup.task_ids), dtype=np.int64, count=len(rows)
            )
        first_rows = [pool.rows[self.rows[self.setup.first_index[t]]] for t in uids]
        # Eligibility depends on a task's label and group size only: one class per distinct pair, asked once.
        classes = list(dict.fromkeys((r.label, r.group_size) for r in first_rows))
        class_pos = {c: i for i, c in enumerate(classes)}
        self.uid_class = np.fromiter(
            (class_pos[(r.label, r.group_size)] for r in first_rows),
            dtype=np.int16 if len(classes) < 2**15 else np.int64,
            count=len(uids),
        )
        self.masks: dict[bytes, np.ndarray] = {}  # eligibility mask by pattern of eligible classes
        # Classes are numbered in order of first appearance, so np.unique's first indices are each class's first id.
        _, first_of_class = np.unique(self.uid_class, return_index=True)
        self.class_task = [uids[i] for i in first_of_class.tolist()]
        self.class_size = np.array([size for _, size in classes], dtype=np.int64)
        self.all_eligible = np.ones(len(uids), dtype=bool)
        self.all_eligible.flags.writeable = False
        self.none_eligible = np.zeros(len(uids), dtype=bool)
        self.none_eligible.flags.writeable = False

    def fresh(self) -> Any:
        return self.cls(self.setup, self.options)

    def key(self, decision: int) -> int:
        return decision_key(self.setup.seed, self.name, decision)

    def context(
        self, decision: int, *, stats: TaskStatsView | None, mask: np.ndarray | None, step: int, version: int
    ) -> SamplerContext:
        """Decision ``decision``'s context; ``mask`` is the eligibility per distinct id (None: all eligible)."""
        first, of_row = self.setup.first_index, self.uid_of_row
        if mask is None:
            mask = self.all_eligible

        def eligible(task_id: str) -> bool:
            i = first.get(task_id)
            return i is not None and bool(mask[of_row[i]])

        return SamplerContext(
            task_ids=self.setup.task_ids,
            entry=self.entry,
            decision=decision,
            key=self.key(decision),
            eligible=eligible,
            stats=stats,
            step=step,
            versions={"main": version},
            mask=(self.setup.unique_ids, mask),
        )

    # -- warnings
    def warn_once(self, kind: str, message: str) -> None:
        """Warn ``task sampler <name>: <message>`` the first time this member fails in this ``kind`` of way."""
        if kind not in self.failures_seen:
            self.failures_seen.add(kind)
            self.warnings.append(f"task sampler {self.name}: {message}")

    def drain(self) -> None:
        """Pass on the notes the sampler left with ``Sampler.warn`` (each once)."""
        notes = self.sampler.__dict__.pop("_platoon_warnings", None) if hasattr(self.sampler, "__dict__") else None
        for note in notes or ():
            self.warn_once(f"note:{note}", note)

    def loss_weight(self, task_id: str) -> float:
        """The sampler's ``loss_weight(task_id)``; 1, said once, when it raises or gives no finite number above 0."""
        try:
            w = self.sampler.loss_weight(task_id)
        except Exception as exc:  # noqa: BLE001 - a sampler's weight must not stop a step
            self.warn_once("loss_weight", f"loss_weight raised {type(exc).__name__}: {exc}; its groups weigh 1")
            return 1.0
        finally:
            self.drain()
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0:
            self.warn_once("loss_weight", f"loss_weight gave {w!r}, not a number above 0; its groups weigh 1")
            return 1.0
        return float(w)

    # -- eligibility
    def mask(self, eligible: Callable[[str], bool], max_group_size: int | None) -> np.ndarray:
        """Eligibility per distinct id: ``eligible`` asked once per (label, group size) class, with its first task;
        with ``max_group_size``, a class whose group size is larger is not eligible. Read-only; cached by pattern."""
        ok = np.fromiter((bool(eligible(t)) for t in self.class_task), dtype=bool, count=len(self.class_task))
        if max_group_size is not None:
            ok &= self.class_size <= max_group_size
        if ok.all():
            return self.all_eligible
        if not ok.any():
            return self.none_eligible
        pattern = ok.tobytes()
        mask = self.masks.get(pattern)
        if mask is None:
            # Comparisons on small class codes: a gather over the whole pool costs ten times more.
            by_blocked = int(np.count_nonzero(~ok)) <= int(np.count_nonzero(ok))
            classes = np.flatnonzero(~ok if by_blocked else ok)
            hit = self.uid_class == classes[0]
            for c in classes[1:]:
                hit |= self.uid_class == c
            mask = ~hit if by_blocked else hit
            mask.flags.writeable = False
            if len(self.masks) >= 16:
                self.masks.clear()
            self.masks[pattern] = mask
        return mask

    # -- the sampler's own metrics
    def own_metrics(self, view: TaskStatsView | None) -> dict[str, float]:
        """The sampler's ``metrics(view)``, cleaned (``clean_metrics``); a failure or a bad answer drops them and
        warns once, reserved keys are left out with a warning."""
        try:
            raw = self.sampler.metrics(view)
        except Exception as exc:  # noqa: BLE001
            self.warn_once("metrics", f"metrics raised {type(exc).__name__}: {exc}; its metrics are dropped")
            return {}
        finally:
            self.drain()
        kept, problem, reserved = clean_metrics(raw)
        if problem:
            self.warn_once("metrics", f"metrics {problem}; its metrics are dropped")
        if reserved:
            self.warn_once("reserved", f"metrics used reserved keys {reserved}; they are left out")
        return kept
