"""The store's reads over many tasks at once: what a sampler scores a pool with, without a Python loop per task.

What this module owns: ``StoreArrays``, the part of `TaskStatsStore` (``platoon.policy.stats``) that maps a list of
task ids to store positions (cached by the identity of the list) and gathers the store's per-task numpy arrays
through them: `count_arrays`, `posterior_arrays`, and the sparse reads (`outstanding_tasks`, `without_evidence`,
`seen_positions`) whose cost grows with the tasks they name, not with the pool.

Rules it keeps:
- every array it returns is read-only (a view of the store's own data, or a fresh array);
- ids outside the pool read as zeros (counts) or as the run's prior with no evidence (posteriors);
- ``posterior_arrays`` equals ``TaskStatsStore.posterior`` task by task.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from platoon.policy.posterior import evidence_weights, posterior_params
from platoon.policy.totals import TaskCountArrays


class StoreArrays:
    """The batched reads of `TaskStatsStore` (a base class of it, on its fields: ``ids``, ``_index``, the entries'
    codes and sizes, ``_task_label``, the per-task arrays ``_groups``, ``_outstanding_n``, ``_drawn``, ``_ustreak``,
    ``_nestreak``, ``_ev_p``, ``_ev_f``, ``_ev_v``, the sparse sets ``_busy`` and ``_no_evidence``, ``_records``,
    and its caches of positions and prior centres)."""

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
