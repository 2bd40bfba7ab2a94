"""Per-task statistics: the store (``TaskStatsStore``, 0.4.0's name), read through this one module.

What this module owns: the ``TaskStatsStore`` that routes settles, draws and fates to the totals of the run, each entry,
each label and each task, answers the posterior and count reads, and writes and loads its part of a snapshot; and
the store's constants (``NO_EVIDENCE_LIMIT``, ``HISTORY``, ``MEANS``, ``SNAPSHOT_FORMAT``). The rest of the
statistics lives beside it, and this module re-exports it, so that a reader imports one name:

- ``platoon.policy.records``: ``MemberResult``, ``GroupRecord`` (one rollout, one settled group), the decay of
  evidence over policy versions;
- ``platoon.policy.totals``: ``GroupTotals`` (what one settled group adds), ``TaskStats``, ``TaskCounts``;
- ``platoon.policy.posterior``: the formulas (prior, posterior, ``pass_at``, ``informative_at``, bands).

Rules it keeps:
- evidence is dated by a group's oldest datum version, never by when it settled; a late, older group is added with
  a discount and does not move the counts' version;
- the prior centre of a task's posterior comes from its entry's decayed totals and is cached per (entry, version);
  the cache is cleared on every settle and every load;
- the store applies whatever it is given in the order given: applying settles in draw order is the recorder's job;
- a malformed snapshot is a ValueError and leaves the store as it was.

The hot per-task fields (evidence, groups, outstanding, drawn, streaks) live in numpy arrays indexed by the task's
place in the pool, so that a sampler can score many tasks at once (`posterior_arrays`, `count_arrays`) without a
Python loop per task. Everything else of a task is built lazily on its first settle, draw or fate.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from platoon.policy.posterior import (
    BANDS,
    PRIOR_STRENGTH,
    band,
    evidence_weight,
    evidence_weights,
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
from platoon.policy.totals import (
    TOTAL_FIELDS,
    GroupTotals,
    SettleCounts,
    TaskCountArrays,
    TaskCounts,
    TaskStats,
)

NO_EVIDENCE_LIMIT = 3
"""A task whose last 3 groups had no valid member is "without evidence" (pass_rate reaches it by exploring only)."""
HISTORY = 8
"""How many newest group summaries each task keeps."""
SNAPSHOT_FORMAT = 1
"""The snapshot as JSON data, one object per task (``to_json``)."""
COLUMNS_FORMAT = 2
"""The snapshot with its tasks as columns, numpy arrays of one row per touched task (``to_columns``)."""
MEANS = ("steps", "output_tokens", "seconds", "reward")
"""The decayed per-task means, by name."""

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


class _TaskRecord:
    """What a task keeps beyond its array fields; built on the task's first settle, draw or fate."""

    __slots__ = ("totals", "means", "history", "fates")

    def __init__(self) -> None:
        self.totals = GroupTotals()
        self.means = {name: DecayedMean() for name in MEANS}
        self.history: deque[GroupSummary] = deque(maxlen=HISTORY)
        self.fates = dict.fromkeys(FATES, 0)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


class TaskStatsStore:
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
        self._records: dict[int, _TaskRecord] = {}
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
        rec = self._records.get(i) or _TaskRecord()
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

    def positions(self, task_ids: Sequence[str]) -> slice | np.ndarray:
        """The store positions of ``task_ids``: a slice when they are a contiguous run of the pool, else an int
        array with -1 for ids outside it. Cached by the identity of ``task_ids`` (pass the same tuple each time)."""
        return self._positions(task_ids)[0]

    def _positions(self, task_ids: Sequence[str]) -> tuple[slice | np.ndarray, np.ndarray | None]:
        hit = self._position_cache.get(id(task_ids))
        if hit is not None and hit[0] is task_ids:
            return hit[1], hit[2]
        pos = np.fromiter((self._index.get(t, -1) for t in task_ids), dtype=np.int64, count=len(task_ids))
        missing = pos < 0
        sel: slice | np.ndarray = pos
        if not missing.any() and (len(pos) == 0 or np.array_equal(pos, np.arange(pos[0], pos[0] + len(pos)))):
            sel = slice(int(pos[0]) if len(pos) else 0, int(pos[0]) + len(pos) if len(pos) else 0)
        unknown = missing if missing.any() else None
        if len(self._position_cache) > 64:
            self._position_cache.clear()
        self._position_cache[id(task_ids)] = (task_ids, sel, unknown)
        return sel, unknown

    def _gather(
        self, arr: np.ndarray, sel: slice | np.ndarray, unknown: np.ndarray | None, fill: float
    ) -> np.ndarray:
        if unknown is None:
            out = arr[sel]
        else:
            out = (
                np.where(unknown, fill, arr[np.where(unknown, 0, sel)])
                if len(arr)
                else np.full(len(sel), fill)
            )
        out = out.view()
        out.flags.writeable = False
        return out

    def _local(self, positions: set[int], task_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(indices into task_ids, store positions)`` of the given store positions that ``task_ids`` holds."""
        pos = np.array(sorted(positions), dtype=np.int64)
        sel, _ = self._positions(task_ids)
        if isinstance(sel, slice):
            local = pos - sel.start
            inside = (local >= 0) & (local < sel.stop - sel.start)
        else:
            hit = self._position_cache[id(task_ids)]
            if len(hit) < 4:
                inverse = np.full(len(self.ids), -1, dtype=np.int64)
                known = sel >= 0
                inverse[sel[known]] = np.flatnonzero(known)
                hit = self._position_cache[id(task_ids)] = (*hit, inverse)
            local = hit[3][pos] if len(pos) else pos
            inside = local >= 0
        return local[inside], pos[inside]

    def outstanding_tasks(self, task_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tasks of ``task_ids`` with draws outstanding: ``(indices into task_ids, outstanding, groups)``, in
        pool order. Sparse: its cost grows with the outstanding draws, not with the pool."""
        local, pos = self._local(self._busy, task_ids)
        return local, self._outstanding_n[pos], self._groups[pos]

    def without_evidence(self, task_ids: Sequence[str]) -> np.ndarray:
        """Indices into ``task_ids`` of the tasks with ``no_evidence_streak >= NO_EVIDENCE_LIMIT`` (sparse)."""
        return self._local(self._no_evidence, task_ids)[0]

    def seen_positions(self) -> np.ndarray:
        """Store positions of the tasks with a reported group (one with members), in pool order. Sparse: its cost
        grows with the tasks that settled a group, not with the pool."""
        seen = sorted(i for i, rec in self._records.items() if rec.totals.reported_groups > 0)
        return np.array(seen, dtype=np.int64)

    def label_mask(self, label: str) -> np.ndarray:
        """A boolean array over the pool: which tasks carry ``label`` (cached; labels never change)."""
        masks = self.__dict__.setdefault("_label_masks", {})
        if label not in masks:
            masks[label] = np.array(self._task_label, dtype=object) == label
        return masks[label]

    def group_sizes(self, positions: np.ndarray) -> np.ndarray:
        """The group size of the task at each store position (its entry's; the run's without one)."""
        sizes = np.array([self.group_size_run, *(self.entries[n].group_size for n in self._entry_names)])
        return sizes[self._entry_code[positions]] if len(positions) else np.zeros(0, dtype=np.int64)

    def count_arrays(self, task_ids: Sequence[str]) -> TaskCountArrays:
        """`TaskCounts` of ``task_ids`` at once (read-only arrays; ids outside the pool read as zeros)."""
        sel, unknown = self._positions(task_ids)
        g = self._gather
        return TaskCountArrays(
            g(self._groups, sel, unknown, 0),
            g(self._outstanding_n, sel, unknown, 0),
            g(self._drawn, sel, unknown, 0),
            g(self._ustreak, sel, unknown, 0),
            g(self._nestreak, sel, unknown, 0),
            g(self._ev_v, sel, unknown, np.nan),
        )

    def posterior_arrays(self, task_ids: Sequence[str], now: float, subset: np.ndarray | None = None):
        """``(alpha, beta)`` arrays of ``task_ids`` (or of ``task_ids[subset]``), equal to `posterior` per task.

        Ids outside the pool read as the run's prior with no evidence.
        """
        sel, unknown = self._positions(task_ids)
        if subset is not None:
            base = np.asarray(subset, dtype=np.int64) + sel.start if isinstance(sel, slice) else sel[subset]
            unknown = None if unknown is None else unknown[subset]
            sel = base
        if unknown is not None:
            sel = np.where(unknown, 0, sel)
        key = (-1, now)  # the prior centres of all entries at ``now``, cached beside the scalar ones
        priors = self._prior_cache.get(key)
        if priors is None:
            priors = np.array([self._prior_by_code(c, now) for c in range(len(self._entry_names) + 1)])
            self._prior_cache[key] = priors
        codes = self._entry_code[sel] if len(self._entry_code) else np.zeros(0, dtype=np.int64)
        w = evidence_weights(now - self._ev_v[sel])
        s, f = self._ev_p[sel] * w, self._ev_f[sel] * w
        if unknown is not None:
            codes[unknown] = 0
            s[unknown] = 0.0
            f[unknown] = 0.0
        return posterior_params(priors[codes], s, f)

    # -- writes
    def _record(self, i: int) -> _TaskRecord:
        rec = self._records.get(i)
        if rec is None:
            rec = self._records[i] = _TaskRecord()
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
        if v is not None:
            means = rec.means
            steps, tokens, secs, reward = means["steps"], means["output_tokens"], means["seconds"], means["reward"]
            for m in members:  # ``add_value``'s own arithmetic, the calls unrolled (a settle does this per member)
                if m.steps is not None:
                    steps.add(float(m.steps), 1.0, v)
                if m.output_tokens is not None:
                    tokens.add(float(m.output_tokens), 1.0, v)
                if m.seconds is not None:
                    secs.add(float(m.seconds), 1.0, v)
                if m.valid and m.reward is not None:
                    reward.add(float(m.reward), 1.0, v)
        seconds = [m.seconds for m in members if m.seconds is not None]
        rec.history.append(
            GroupSummary(
                record.start,
                record.seq,
                v,
                valid,
                passes,
                _mean([m.reward for m in members if m.valid and m.reward is not None]),
                record.verdict,
                _mean([m.steps for m in members if m.steps is not None]),
                max(seconds) if seconds else None,
            )
        )
        self._groups[i] = rec.totals.groups
        d = rec.totals.decayed
        self._ev_p[i], self._ev_f[i] = d.passes, d.fails
        self._ev_v[i] = np.nan if d.version is None else d.version
        self._changed(i)

    def draw(self, start: int, seq: int, task_id: str, position: int | None = None) -> None:
        """Mark draw ``(start, seq)`` outstanding; a key already outstanding is a ValueError."""
        key = (int(start), int(seq))
        if key in self._outstanding:
            raise ValueError(f"draw {key} is already outstanding")
        self._outstanding[key] = (task_id, position)
        i = self._index.get(task_id)
        if i is not None:
            self._record(i)
            self._drawn[i] += 1
            self._outstanding_n[i] += 1
            self._busy.add(i)
            self._changed(i)

    def fate(self, start: int, seq: int, fate: str, task_id: str | None = None) -> str | None:
        """Give draw ``(start, seq)`` its fate; returns the task it names (``task_id`` if it was not outstanding)."""
        if fate not in FATES:
            raise ValueError(f"unknown fate {fate!r}; one of {', '.join(FATES)}")
        drawn = self._outstanding.pop((int(start), int(seq)), None)
        if drawn is not None:
            task_id = drawn[0]
            i = self._index.get(task_id)
            if i is not None and self._outstanding_n[i] > 0:
                self._outstanding_n[i] -= 1
                self._changed(i)
                if self._outstanding_n[i] == 0:
                    self._busy.discard(i)
        i = self._index.get(task_id) if task_id is not None else None
        if i is not None:
            self._record(i).fates[fate] += 1
        return task_id

    def reissue(self, old_key: tuple[int, int], new_key: tuple[int, int]) -> bool:
        """Move an outstanding draw to ``new_key`` (neither ``drawn`` nor a fate changes); False if not outstanding."""
        old, new = (int(old_key[0]), int(old_key[1])), (int(new_key[0]), int(new_key[1]))
        if old not in self._outstanding:
            return False
        if new in self._outstanding:
            raise ValueError(f"draw {new} is already outstanding")
        self._outstanding[new] = self._outstanding.pop(old)
        return True

    def is_outstanding(self, key: tuple[int, int]) -> bool:
        return (int(key[0]), int(key[1])) in self._outstanding

    def outstanding_draw(self, key: tuple[int, int]) -> tuple[str, int | None] | None:
        """``(task_id, position)`` of an outstanding draw, or None."""
        return self._outstanding.get((int(key[0]), int(key[1])))

    def outstanding_draws(self) -> list[tuple[int, int, str, int | None]]:
        """``[(start, seq, task_id, position), ...]`` in draw order."""
        return [(s, q, t, p) for (s, q), (t, p) in sorted(self._outstanding.items())]

    def replace_outstanding(self, draws: Sequence[tuple[int, int, str, int | None]]) -> None:
        """Make ``draws`` (``[(start, seq, task_id, position), ...]``) the outstanding draws, wholesale, with each
        task's outstanding count; nothing else changes. For a resume whose statistics are not its checkpoint's own
        (an older snapshot, or none): the checkpoint's dispatch state says what is outstanding."""
        self._outstanding = {}
        self._outstanding_n[:] = 0
        self._busy = set()
        self._counts.clear()
        for s, q, task_id, position in draws:
            key = (int(s), int(q))
            if key in self._outstanding:
                raise ValueError(f"draw {key} is outstanding twice")
            self._outstanding[key] = (str(task_id), None if position is None else int(position))
            i = self._index.get(task_id)
            if i is not None:
                self._record(i)
                self._outstanding_n[i] += 1
                self._busy.add(i)

    def lose_outstanding(self) -> list[tuple[int, int, str]]:
        """Give ``lost`` to every outstanding draw, in draw order; returns ``[(start, seq, task_id), ...]``."""
        lost = []
        for s, q, t, _ in self.outstanding_draws():
            self.fate(s, q, "lost")
            lost.append((s, q, t))
        return lost

    # -- persistence
    def to_json(self) -> dict[str, Any]:
        """The store's part of a snapshot (1.10): settings, totals, touched tasks, outstanding draws."""
        header = self._header()
        outstanding = header.pop("outstanding")  # the keys in their order of old: tasks before outstanding
        return {**header, "tasks": self._tasks_json(), "outstanding": outstanding}

    def to_columns(self) -> dict[str, Any]:
        """``to_json`` with ``tasks`` replaced by ``columns``: one numpy array per field (``TASK_COLUMNS``), a row
        per touched task in pool order; a history is flattened into the ``h_*`` columns, ``h_count`` rows a task.
        A missing version or mean is NaN. The arrays are the store's own data, copied: a runs layer writes them."""
        return {**self._header(), "columns": _task_columns(self)}

    def _header(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "group_size": self.group_size_run,
            "half_life_versions": HALF_LIFE_VERSIONS,
            "prior_strength": PRIOR_STRENGTH,
            "no_evidence_limit": NO_EVIDENCE_LIMIT,
            "entries": {
                name: {
                    "group_size": s.group_size,
                    "success_threshold": s.success_threshold,
                    "totals": self.entry_totals[name].to_json(),
                }
                for name, s in self.entries.items()
            },
            "labels": {label: t.to_json() for label, t in self.label_totals.items()},
            "run": self.run.to_json(),
            "outstanding": [list(d) for d in self.outstanding_draws()],
        }

    def _tasks_json(self) -> dict[str, Any]:
        tasks = {}
        for i in sorted(self._records):
            rec = self._records[i]
            c = self.counts(self.ids[i])
            data = rec.totals.to_json()
            tasks[self.ids[i]] = {
                "entry": self._task_entry[i],
                "label": self._task_label[i],
                **data,
                "uniform_streak": c.uniform_streak,
                "no_evidence_streak": c.no_evidence_streak,
                "metrics": {k: rec.means[k].to_json() for k in MEANS},
                "history": [list(h) for h in rec.history],
                "fates": dict(sorted(rec.fates.items())),
                "drawn": c.drawn,
                "outstanding": c.outstanding,
            }
        return tasks

    def load_json(self, data: Mapping[str, Any]) -> None:
        """Replace the contents with a snapshot's: tasks that left the pool are dropped, new ones start empty, entry
        totals load only for entries still configured, the outstanding draws are replaced wholesale. A malformed
        snapshot is a ValueError and leaves the store as it was."""
        try:
            staged = self.fresh()
            staged._load(data)
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"malformed statistics snapshot: {type(exc).__name__}: {exc}") from exc
        self.__dict__.update({k: v for k, v in staged.__dict__.items() if k != "_position_cache"})
        self._prior_cache.clear()

    def _load(self, data: Mapping[str, Any]) -> None:
        self.run = GroupTotals.from_json(data["run"])
        for name, e in data.get("entries", {}).items():
            if name in self.entry_totals:
                self.entry_totals[name] = GroupTotals.from_json(e["totals"])
        for label, t in data.get("labels", {}).items():
            if label in self.label_totals:
                self.label_totals[label] = GroupTotals.from_json(t)
        if "columns" in data:
            self._load_columns(data["columns"])
        for task_id, t in data.get("tasks", {}).items():
            i = self._index.get(task_id)
            if i is None:
                continue
            rec = self._record(i)
            rec.totals = GroupTotals.from_json(t)
            for k in MEANS:
                a, b, v = t["metrics"][k]
                rec.means[k] = DecayedMean(float(a), float(b), None if v is None else int(v))
            rec.history.extend(GroupSummary(*h) for h in t["history"])
            unknown = set(t["fates"]) - set(FATES)
            if unknown:
                raise ValueError(f"task {task_id!r}: unknown fates {sorted(unknown)}")
            rec.fates.update({k: int(n) for k, n in t["fates"].items()})
            self._groups[i] = rec.totals.groups
            d = rec.totals.decayed
            self._ev_p[i], self._ev_f[i] = d.passes, d.fails
            self._ev_v[i] = np.nan if d.version is None else d.version
            self._ustreak[i] = int(t["uniform_streak"])
            self._nestreak[i] = int(t["no_evidence_streak"])
            self._drawn[i] = int(t["drawn"])
            self._outstanding_n[i] = int(t["outstanding"])
        self._load_outstanding(data)

    def _load_outstanding(self, data: Mapping[str, Any]) -> None:
        for s, q, task_id, position in data.get("outstanding", []):
            self._outstanding[(int(s), int(q))] = (str(task_id), None if position is None else int(position))
        self._busy = set(np.flatnonzero(self._outstanding_n > 0).tolist())
        self._no_evidence = set(np.flatnonzero(self._nestreak >= NO_EVIDENCE_LIMIT).tolist())
        self._counts.clear()

    def _load_columns(self, columns: Mapping[str, Any]) -> None:
        """Load ``to_columns``'s arrays (a ValueError, via ``load_json``, for missing or ragged columns)."""
        c = {name: np.asarray(columns[name]) for name in TASK_COLUMNS}
        n = len(c["task"])
        if any(len(a) != n for name, a in c.items() if not name.startswith("h_") or name == "h_count"):
            raise ValueError("the task columns are not all of one length")
        ends = np.cumsum(c["h_count"])
        if n and (int(ends[-1]) != len(c["h_start"]) or int(c["h_count"].min()) < 0):
            raise ValueError("the history columns do not add up to h_count")
        if any(len(c[name]) != len(c["h_start"]) for name in HISTORY_COLUMNS):
            raise ValueError("the history columns are not all of one length")
        verdicts = c["h_verdict"].tolist()
        if set(verdicts) - set(VERDICTS):
            raise ValueError(f"unknown verdicts {sorted(set(verdicts) - set(VERDICTS))}")
        lists = {name: c[name].tolist() for name in TASK_COLUMNS if name != "h_verdict"}
        lists["h_verdict"] = verdicts
        for row, task_id in enumerate(lists["task"]):
            i = self._index.get(task_id)
            if i is not None:
                self._load_row(i, row, lists, int(ends[row]) - lists["h_count"][row])

    def _load_row(self, i: int, row: int, c: Mapping[str, list], h0: int) -> None:
        rec = self._record(i)
        t = rec.totals = GroupTotals(
            **{name: int(c[name][row]) for name in TOTAL_FIELDS if name != "reward_sum"},
            reward_sum=float(c["reward_sum"][row]),
            decayed=DecayedCounts(c["ev_a"][row], c["ev_b"][row], _version(c["ev_v"][row])))
        for k in MEANS:
            rec.means[k] = DecayedMean(c[f"{k}_a"][row], c[f"{k}_b"][row], _version(c[f"{k}_v"][row]))
        for j in range(h0, h0 + c["h_count"][row]):
            rec.history.append(GroupSummary(
                int(c["h_start"][j]), int(c["h_seq"][j]), _version(c["h_version"][j]), int(c["h_valid"][j]),
                int(c["h_passes"][j]), _value(c["h_reward_mean"][j]), c["h_verdict"][j],
                _value(c["h_steps"][j]), _value(c["h_seconds"][j])))
        rec.fates.update({f: int(c[f"fate_{f}"][row]) for f in FATES})
        self._groups[i] = t.groups
        d = t.decayed
        self._ev_p[i], self._ev_f[i] = d.passes, d.fails
        self._ev_v[i] = np.nan if d.version is None else d.version
        self._ustreak[i] = c["uniform_streak"][row]
        self._nestreak[i] = c["no_evidence_streak"][row]
        self._drawn[i] = c["drawn"][row]
        self._outstanding_n[i] = c["outstanding"][row]




# ------------------------------------------------------------------------------------------------- columns
HISTORY_COLUMNS = ("h_start", "h_seq", "h_version", "h_valid", "h_passes", "h_reward_mean", "h_verdict", "h_steps",
                   "h_seconds")
TASK_COLUMNS = ("task", *TOTAL_FIELDS, "ev_a", "ev_b", "ev_v", "uniform_streak", "no_evidence_streak", "drawn",
                "outstanding", *(f"{k}_{x}" for k in MEANS for x in "abv"), *(f"fate_{f}" for f in FATES),
                "h_count", *HISTORY_COLUMNS)
"""The columns of ``TaskStatsStore.to_columns``: integers int64, means and versions float64 (NaN: none), the task
ids and verdicts strings."""
_FLOATS = {"reward_sum", "ev_a", "ev_b", "ev_v", *(f"{k}_{x}" for k in MEANS for x in "abv"), "h_version",
           "h_reward_mean", "h_steps", "h_seconds"}


def _version(x: float) -> int | None:
    return None if math.isnan(x) else int(x)


def _value(x: float) -> float | None:
    return None if math.isnan(x) else x


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _task_columns(store: TaskStatsStore) -> dict[str, np.ndarray]:
    """The touched tasks of ``store`` as columns (``TASK_COLUMNS``), built a column at a time."""
    rows = sorted(store._records)
    recs = [store._records[i] for i in rows]
    totals = [rec.totals for rec in recs]
    decayed = [t.decayed for t in totals]
    cols: dict[str, list] = {name: [getattr(t, name) for t in totals] for name in TOTAL_FIELDS}
    cols["ev_a"] = [d.passes for d in decayed]
    cols["ev_b"] = [d.fails for d in decayed]
    cols["ev_v"] = [_nan(d.version) for d in decayed]
    for k in MEANS:
        means = [rec.means[k] for rec in recs]
        cols[f"{k}_a"] = [m.passes for m in means]
        cols[f"{k}_b"] = [m.fails for m in means]
        cols[f"{k}_v"] = [_nan(m.version) for m in means]
    for f in FATES:
        cols[f"fate_{f}"] = [rec.fates[f] for rec in recs]
    cols["h_count"] = [len(rec.history) for rec in recs]
    history = [h for rec in recs for h in rec.history]  # GroupSummary tuples: their fields are HISTORY_COLUMNS
    by_field = zip(*history, strict=True) if history else [()] * len(HISTORY_COLUMNS)
    for name, values in zip(HISTORY_COLUMNS, by_field, strict=True):
        cols[name] = [_nan(x) for x in values] if name in _FLOATS else list(values)
    out = {name: np.array(values, dtype=np.float64 if name in _FLOATS else np.int64)
           for name, values in cols.items() if name != "h_verdict"}
    idx = np.array(rows, dtype=np.int64)
    out["uniform_streak"] = store._ustreak[idx]
    out["no_evidence_streak"] = store._nestreak[idx]
    out["drawn"] = store._drawn[idx]
    out["outstanding"] = store._outstanding_n[idx]
    out["task"] = np.array([store.ids[i] for i in rows], dtype=str) if rows else np.zeros(0, dtype="<U1")
    out["h_verdict"] = np.array(cols["h_verdict"], dtype=str) if cols["h_verdict"] else np.zeros(0, dtype="<U1")
    return {name: out[name] for name in TASK_COLUMNS}
