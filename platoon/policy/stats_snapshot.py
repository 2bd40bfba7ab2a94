"""The store's part of a statistics snapshot: as JSON objects (format 1) or as columns (format 2), and back.

What this module owns: ``StoreSnapshot``, the part of `TaskStatsStore` (``platoon.policy.stats``) that writes its
settings, totals, touched tasks and outstanding draws (``to_json``; ``to_columns``, with the tasks as numpy columns,
``TASK_COLUMNS``) and loads either form (``load_json``); the formats' numbers (``SNAPSHOT_FORMAT``,
``COLUMNS_FORMAT``).

Rules it keeps:
- a load is staged on a fresh store and swapped in whole: a malformed snapshot is a ValueError and leaves the store
  as it was;
- tasks that left the pool are dropped, new ones start empty, entry totals load only for entries still configured,
  the outstanding draws are replaced wholesale; an unknown fate or verdict is a ValueError;
- the prior cache is cleared on every load;
- a missing version or mean is NaN in the columns, None in the JSON form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from platoon.policy.posterior import PRIOR_STRENGTH
from platoon.policy.records import (
    FATES,
    HALF_LIFE_VERSIONS,
    VERDICTS,
    DecayedCounts,
    DecayedMean,
    GroupSummary,
)
from platoon.policy.totals import MEANS, NO_EVIDENCE_LIMIT, TOTAL_FIELDS, GroupTotals

SNAPSHOT_FORMAT = 1
"""The snapshot as JSON data, one object per task (``to_json``)."""
COLUMNS_FORMAT = 2
"""The snapshot with its tasks as columns, numpy arrays of one row per touched task (``to_columns``)."""


class StoreSnapshot:
    """Persistence of `TaskStatsStore` (a base class of it: it reads and replaces the store's fields, and stages a
    load on ``fresh()``)."""

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


def _task_columns(store: StoreSnapshot) -> dict[str, np.ndarray]:
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
