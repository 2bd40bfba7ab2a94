"""Per-task statistics: the store (``TaskStatsStore``, 0.4.0's name), read through this one module.

What this module owns: the ``TaskStatsStore`` itself: its pool (ids, entries, labels), its per-task fields, the
scalar reads (``counts``, ``task``, ``posterior``, totals of an entry or a label) and ``settle``, which routes a
settled group to the totals of the run, its entry, its label and its task. The store's other parts live beside it,
one idea a module, as base classes of the store:

- ``platoon.policy.stats_arrays``: reads over many tasks at once (``count_arrays``, ``posterior_arrays``, the
  sparse reads), what a sampler scores a pool with;
- ``platoon.policy.stats_draws``: the ledger of outstanding draws (``draw``, ``fate``, ``reissue``, ...);
- ``platoon.policy.stats_snapshot``: the store's part of a snapshot, as JSON or as columns, and its load.

The records and formulas it is built on live in ``platoon.policy.records`` (``MemberResult``, ``GroupRecord``, the
decay of evidence), ``platoon.policy.totals`` (``GroupTotals``, ``TaskStats``, ``TaskCounts``, what a task keeps)
and ``platoon.policy.posterior`` (prior, posterior, ``pass_at``, ``informative_at``, bands); this module re-exports
their names, so that a reader imports one module.

Rules it keeps:
- evidence is dated by a group's oldest datum version, never by when it settled; a late, older group is added with
  a discount and does not move the counts' version;
- the prior centre of a task's posterior comes from its entry's decayed totals and is cached per (entry, version);
  the cache is cleared on every settle and every load;
- the store applies whatever it is given in the order given: applying settles in draw order is the recorder's job;
- a malformed snapshot is a ValueError and leaves the store as it was.

The hot per-task fields (evidence, groups, outstanding, drawn, streaks) live in numpy arrays indexed by the task's
place in the pool, so that a sampler can score many tasks at once without a Python loop per task. Everything else of
a task (``TaskRecord``) is built lazily on its first settle, draw or fate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from platoon.policy.posterior import (
    BANDS,
    PRIOR_STRENGTH,
    band,
    evidence_weight,
    informative_at,
    pass_at,
    posterior_params,
    prior_centre,
)
from platoon.policy.records import (
    FATES,
    HALF_LIFE_VERSIONS,
    KINDS,
    MAIN,
    VERDICTS,
    DecayedCounts,
    DecayedMean,
    GroupRecord,
    GroupSummary,
    MemberResult,
    decay,
)
from platoon.policy.stats_arrays import StoreArrays
from platoon.policy.stats_draws import StoreDraws
from platoon.policy.stats_snapshot import COLUMNS_FORMAT, SNAPSHOT_FORMAT, StoreSnapshot
from platoon.policy.totals import (
    HISTORY,
    MEANS,
    NO_EVIDENCE_LIMIT,
    TOTAL_FIELDS,
    GroupTotals,
    SettleCounts,
    TaskCountArrays,
    TaskCounts,
    TaskRecord,
    TaskStats,
)

__all__ = [  # the records', totals' and formulas' names too: the statistics are read through this one module
    "BANDS", "FATES", "HALF_LIFE_VERSIONS", "HISTORY", "KINDS", "MAIN", "MEANS", "NO_EVIDENCE_LIMIT",
    "PRIOR_STRENGTH", "SNAPSHOT_FORMAT", "COLUMNS_FORMAT", "VERDICTS", "DecayedCounts", "DecayedMean", "EntrySettings", "GroupRecord",
    "GroupSummary", "GroupTotals", "MemberResult", "TaskCountArrays", "TaskCounts", "TaskStats", "TaskStatsStore",
    "band",
    "decay", "informative_at", "pass_at",
]


class EntrySettings(NamedTuple):
    """An entry's settings the store needs: its group size and success threshold."""

    group_size: int
    success_threshold: float = 1.0


def _entry_settings(value: Any) -> EntrySettings:
    """An entry's settings from an `EntryInfo` (anything with ``group_size`` and ``success_threshold``) or a pair."""
    if hasattr(value, "group_size"):
        return EntrySettings(int(value.group_size), float(value.success_threshold))
    return EntrySettings(*value)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


class TaskStatsStore(StoreArrays, StoreDraws, StoreSnapshot):
    """The per-task statistics of one pool: totals of the run, each entry, each label and each task.

    ``tasks`` lists ``(task_id, entry, label)`` in pool order; a repeated id keeps its first row's entry and label.
    ``entries`` gives each configured entry's group size and success threshold: an `EntryInfo` (as platoon 0.4.0's
    store takes it), an `EntrySettings` or a ``(group_size, success_threshold)`` pair; ``group_size`` is the run's
    (for tasks without an entry; None: the first entry's).

    The reads a sampler or a test makes have 0.4.0's names: ``counts``, ``task``, ``entry``, ``label``, ``labels``,
    ``task_ids``, ``posterior``, ``threshold``, ``group_size`` and ``outstanding``.

    ``settle(record)`` clears the prior cache; a task outside the pool updates the run totals only, else the task,
    the run, its entry (if known) and its label (if not None). Draws are keyed ``(start, seq)``: ``draw`` marks one
    outstanding (the task's ``drawn`` and ``outstanding`` += 1), ``fate`` ends it (``outstanding`` -= 1, never
    below 0; ``fates[fate]`` += 1), ``reissue`` moves it to a new key, ``lose_outstanding`` gives ``lost`` to all.
    """

    def __init__(
        self,
        tasks: Sequence[tuple[str, str | None, str | None]],
        entries: Mapping[str, Any] | None = None,
        *,
        column: str = "_platoon_environment",
        group_size: int | None = None,
    ) -> None:
        self.entries = {str(k): _entry_settings(v) for k, v in (entries or {}).items()}
        self.column = column
        first = next(iter(self.entries.values()), None)
        self.group_size_run = int(
            group_size if group_size is not None else (first.group_size if first else 1)
        )
        ids: list[str] = []
        self._index: dict[str, int] = {}
        self._task_entry: list[str | None] = []
        self._task_label: list[str | None] = []
        for task_id, entry, label in tasks:
            if task_id in self._index:
                continue
            self._index[task_id] = len(ids)
            ids.append(task_id)
            self._task_entry.append(entry)
            self._task_label.append(label)
        self.ids = tuple(ids)
        self._entry_names = tuple(self.entries)
        code = {name: i + 1 for i, name in enumerate(self._entry_names)}
        self._entry_code = np.array([code.get(e, 0) for e in self._task_entry], dtype=np.int64)
        self._labels = tuple(dict.fromkeys(label for label in self._task_label if label is not None))
        self._position_cache: dict[int, tuple] = {}
        self._reset()

    def _reset(self) -> None:
        n = len(self.ids)
        self._groups = np.zeros(n, dtype=np.int64)
        self._outstanding_n = np.zeros(n, dtype=np.int64)
        self._drawn = np.zeros(n, dtype=np.int64)
        self._ustreak = np.zeros(n, dtype=np.int64)
        self._nestreak = np.zeros(n, dtype=np.int64)
        self._ev_p = np.zeros(n)
        self._ev_f = np.zeros(n)
        self._ev_v = np.full(n, np.nan)
        self._records: dict[int, TaskRecord] = {}
        self.run = GroupTotals()
        self.entry_totals = {name: GroupTotals() for name in self._entry_names}
        self.label_totals = {label: GroupTotals() for label in self._labels}
        self._outstanding: dict[tuple[int, int], tuple[str, int | None]] = {}
        self._prior_cache: dict[tuple[int, float], float] = {}
        # Each task's TaskCounts as last read, dropped whenever one of its count fields changes (`_changed`): a
        # decision reads every task's, and a dict hit is several times cheaper than five numpy scalar reads.
        self._counts: dict[str, TaskCounts] = {}
        # Positions with draws outstanding, and without evidence: few, so samplers read them sparsely.
        self._busy: set[int] = set()
        self._no_evidence: set[int] = set()

    def fresh(self) -> TaskStatsStore:
        """An empty store over the same pool."""
        tasks = list(zip(self.ids, self._task_entry, self._task_label, strict=True))
        return TaskStatsStore(tasks, self.entries, column=self.column, group_size=self.group_size_run)

    # -- reads
    def __contains__(self, task_id: object) -> bool:
        return task_id in self._index

    def labels(self) -> tuple[str, ...]:
        return self._labels

    def task_entry(self, task_id: str) -> str | None:
        return self._task_entry[self._index[task_id]]

    def task_label(self, task_id: str) -> str | None:
        return self._task_label[self._index[task_id]]

    def threshold(self, entry: str | None) -> float:
        """The entry's success threshold; 1.0 without an entry (or an unknown one)."""
        settings = self.entries.get(entry) if entry is not None else None
        return settings.success_threshold if settings else 1.0

    def group_size(self, entry: str | None) -> int:
        """The entry's group size; the run's without an entry (or an unknown one)."""
        settings = self.entries.get(entry) if entry is not None else None
        return settings.group_size if settings else self.group_size_run

    def task_ids(self) -> tuple[str, ...]:
        """Every task of the pool, in pool order (each id once)."""
        return self.ids

    def entry(self, name: str) -> GroupTotals:
        """A copy of what entry ``name``'s groups add up to; KeyError for an entry it does not know."""
        return self.entry_totals[name].copy()

    def label(self, label: str) -> GroupTotals:
        """A copy of what the groups of the tasks labelled ``label`` add up to; KeyError for an unknown label."""
        return self.label_totals[label].copy()

    @property
    def outstanding(self) -> list[tuple[int, int, str, int | None]]:
        """The draws no committed step has consumed: ``(start, seq, task_id, position)`` each, in draw order."""
        return self.outstanding_draws()

    def counts(self, task_id: str) -> TaskCounts:
        """The cheap read of one task (cached until the task's counts change); KeyError for a task outside the
        pool."""
        found = self._counts.get(task_id)
        if found is None:
            found = self._counts[task_id] = self._read_counts(task_id)
        return found

    def _changed(self, i: int) -> None:
        """Task ``i``'s count fields changed: its cached `TaskCounts` is stale."""
        self._counts.pop(self.ids[i], None)

    def _read_counts(self, task_id: str) -> TaskCounts:
        i = self._index[task_id]
        v = self._ev_v[i]
        return TaskCounts(
            int(self._groups[i]),
            int(self._outstanding_n[i]),
            int(self._drawn[i]),
            int(self._ustreak[i]),
            int(self._nestreak[i]),
            None if math.isnan(v) else int(v),
        )

    def task(self, task_id: str) -> TaskStats:
        """A full copy of one task's statistics; KeyError for a task outside the pool."""
        i = self._index[task_id]
        rec = self._records.get(i) or TaskRecord()
        c = self.counts(task_id)
        totals = rec.totals.copy()
        return TaskStats(
            **{k: getattr(totals, k) for k in TOTAL_FIELDS},
            decayed=totals.decayed,
            task_id=task_id,
            entry=self._task_entry[i],
            label=self._task_label[i],
            uniform_streak=c.uniform_streak,
            no_evidence_streak=c.no_evidence_streak,
            outstanding=c.outstanding,
            drawn=c.drawn,
            fates=dict(rec.fates),
            history=tuple(rec.history),
            means={k: m.copy() for k, m in rec.means.items()},
        )

    def prior_centre(self, entry: str | None, now: float) -> float:
        """``m = (1 + P) / (2 + P + F)`` from the entry's decayed totals at ``now`` (the run's without an entry)."""
        return self._prior_by_code(self._entry_names.index(entry) + 1 if entry in self.entries else 0, now)

    def _prior_by_code(self, code: int, now: float) -> float:
        m = self._prior_cache.get((code, now))
        if m is None:
            totals = self.run if code == 0 else self.entry_totals[self._entry_names[code - 1]]
            m = self._prior_cache[(code, now)] = prior_centre(*totals.decayed.read(now))
        return m

    def posterior(self, task_id: str, now: float) -> tuple[float, float]:
        """``(alpha, beta) = (2m + s, 2(1 - m) + f)``: prior centre ``m``, the task's decayed counts ``(s, f)``."""
        i = self._index[task_id]
        m = self._prior_by_code(int(self._entry_code[i]), now)
        w = evidence_weight(now - float(self._ev_v[i]))
        return posterior_params(m, float(self._ev_p[i]) * w, float(self._ev_f[i]) * w)

    # -- writes
    def _record(self, i: int) -> TaskRecord:
        rec = self._records.get(i)
        if rec is None:
            rec = self._records[i] = TaskRecord()
        return rec

    def settle(self, record: GroupRecord) -> None:
        """Apply one settled group (see the class doc for its routing, `GroupTotals` for its counts)."""
        self._prior_cache.clear()
        i = self._index.get(record.task_id)
        entry = record.entry if record.entry in self.entries else None
        if entry is None and i is not None:
            entry = self._task_entry[i]
        threshold = self.threshold(entry)
        v = record.oldest_version()
        counts = SettleCounts.of(record, threshold)  # once: the record goes to up to four totals
        self.run.add_counts(counts, v)
        if i is None:
            return
        rec = self._record(i)
        rec.totals.add_counts(counts, v)
        if entry in self.entry_totals:
            self.entry_totals[entry].add_counts(counts, v)
        label = self._task_label[i]
        if label is not None:
            self.label_totals.setdefault(label, GroupTotals()).add_counts(counts, v)
        valid, passes = counts.valid, counts.passes
        if record.members or record.verdict != "unknown":
            self._ustreak[i] = self._ustreak[i] + 1 if record.verdict == "uniform" else 0
            self._nestreak[i] = 0 if valid > 0 else self._nestreak[i] + 1
            if self._nestreak[i] >= NO_EVIDENCE_LIMIT:
                self._no_evidence.add(i)
            else:
                self._no_evidence.discard(i)
        members = record.members
        steps = [m.steps for m in members if m.steps is not None]
        seconds = [m.seconds for m in members if m.seconds is not None]
        rewards = [m.reward for m in members if m.valid and m.reward is not None]
        if v is not None:
            means = rec.means
            means["steps"].add_values(steps, v)
            means["output_tokens"].add_values([m.output_tokens for m in members if m.output_tokens is not None], v)
            means["seconds"].add_values(seconds, v)
            means["reward"].add_values(rewards, v)
        rec.history.append(
            GroupSummary(record.start, record.seq, v, valid, passes, _mean(rewards), record.verdict, _mean(steps),
                         max(seconds) if seconds else None)
        )
        self._groups[i] = rec.totals.groups
        d = rec.totals.decayed
        self._ev_p[i], self._ev_f[i] = d.passes, d.fails
        self._ev_v[i] = np.nan if d.version is None else d.version
        self._changed(i)
