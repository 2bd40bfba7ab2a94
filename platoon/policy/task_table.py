"""Per-task tables and step metrics from the statistics: ``platoon tasks show|export`` and ``train/tasks/*``.

Pure functions over a ``TaskStatsStore`` read at a policy version. The export's 26 columns keep the release's order:
``fate_rejected`` comes right after ``fate_lost``, so the five columns after it (``group_size`` to ``newest_version``)
sit one place to the right of 0.3's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from platoon.policy.pool import label_prefix
from platoon.policy.stats import BANDS, FATES, TaskStatsStore, informative_at, pass_at

TASK_COLUMNS = (
    "task_id", "entry", "label", "groups", "reported_groups", "attempts", "passes", "informative_groups",
    "all_pass_groups", "all_fail_groups", "uniform_mixed_groups", "uniform_streak", "no_evidence_streak", "drawn",
    "outstanding", *(f"fate_{f}" for f in FATES), "group_size", "pass_rate", "pass_at_G", "informative_at_G",
    "newest_version",
)
SORTS = ("informative", "pass_rate", "groups")


def store_from_snapshot(snapshot: Mapping[str, Any], pool: Sequence[Sequence[Any]] | None = None) -> TaskStatsStore:
    """A store holding ``snapshot``; ``pool`` lists ``(task_id, entry, label)`` in pool order (the snapshot's own
    tasks when not given: then tasks that never settled a group are missing)."""
    if pool is not None:
        tasks = [tuple(t) for t in pool]
    elif "columns" in snapshot:  # the columnar form keeps no entry or label of its own: the pool has them
        tasks = [(tid, None, None) for tid in snapshot["columns"]["task"].tolist()]
    else:
        tasks = [(tid, rec.get("entry"), rec.get("label")) for tid, rec in snapshot["tasks"].items()]
    entries = {name: (e["group_size"], e["success_threshold"]) for name, e in snapshot.get("entries", {}).items()}
    store = TaskStatsStore(tasks, entries, column=snapshot.get("column", "_platoon_environment"),
                      group_size=snapshot.get("group_size"))
    store.load_json(snapshot)
    return store


def task_rows(store: TaskStatsStore, version: int) -> list[dict[str, Any]]:
    """One row per task of the pool, in pool order, with exactly ``TASK_COLUMNS``."""
    rows = []
    for task_id in store.ids:
        s = store.task(task_id)
        a, b = store.posterior(task_id, version)
        g = store.group_size(s.entry)
        versions = [h.version for h in s.history if h.version is not None]
        row = {
            "task_id": task_id, "entry": s.entry, "label": s.label, "groups": s.groups,
            "reported_groups": s.reported_groups, "attempts": s.attempts, "passes": s.passes,
            "informative_groups": s.informative_groups, "all_pass_groups": s.all_pass_groups,
            "all_fail_groups": s.all_fail_groups, "uniform_mixed_groups": s.uniform_mixed_groups,
            "uniform_streak": s.uniform_streak, "no_evidence_streak": s.no_evidence_streak, "drawn": s.drawn,
            "outstanding": s.outstanding, **{f"fate_{f}": s.fates.get(f, 0) for f in FATES}, "group_size": g,
            "pass_rate": a / (a + b), "pass_at_G": float(pass_at(a, b, g)),
            "informative_at_G": float(informative_at(a, b, g)),
            "newest_version": max(versions) if versions else None,
        }
        rows.append(row)
    return rows


def sort_rows(rows: list[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    if by == "informative":
        return sorted(rows, key=lambda r: (-r["informative_at_G"], r["task_id"]))
    if by == "pass_rate":
        return sorted(rows, key=lambda r: (r["pass_rate"], r["task_id"]))
    if by == "groups":
        return sorted(rows, key=lambda r: (-r["groups"], r["task_id"]))
    raise ValueError(f"unknown sort {by!r}; one of {', '.join(SORTS)}")


def show_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The ``tasks show`` table: task left-aligned, numbers right-aligned, fates joined with ``/``."""
    header = ["task", "groups", "pass/att", "E[p]", "E[pass@G]", "E[inf]", "newest v", "out",
              "/".join(FATES)]
    body = [[str(r["task_id"]), str(r["groups"]), f"{r['passes']}/{r['attempts']}", f"{r['pass_rate']:.2f}",
             f"{r['pass_at_G']:.2f}", f"{r['informative_at_G']:.2f}",
             "" if r["newest_version"] is None else str(r["newest_version"]), str(r["outstanding"]),
             "/".join(str(r[f"fate_{f}"]) for f in FATES)] for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = []
    for line in [header, *body]:
        cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:-1], widths[1:-1], strict=True)]
        lines.append("  ".join([*cells, line[-1]]))
    return "\n".join(lines)


def task_metrics(store: TaskStatsStore, version: int) -> dict[str, float]:
    """``train/tasks/*`` at ``version``: over all tasks, then per label (``train/tasks/<column>/<label>/``, the
    column being ``environment`` when labels are entries' names, else ``train.label_by``'s: ``label_prefix``).

    "Seen" tasks have a reported group; ``pass_at_1``/``pass_at_G`` are means over them (left out when none is
    seen), ``coverage`` is seen / all, ``bands/<band>`` counts seen tasks by posterior mean, ``no_evidence`` counts
    tasks whose last 3 groups had no valid member. Vectorised over the seen tasks: a step's metrics cost grows
    with the tasks that settled a group, not with the pool.
    """
    seen = store.seen_positions()
    a, b = store.posterior_arrays(store.ids, version, subset=seen)
    p1 = a / (a + b)
    sizes = store.group_sizes(seen)
    pg = np.zeros(len(seen))
    for k in np.unique(sizes):
        pg[sizes == k] = pass_at(a[sizes == k], b[sizes == k], int(k))
    bands = band_indices(p1)
    no_evidence = store.without_evidence(store.ids)
    metrics = _metrics("train/tasks/", len(store.ids), p1, pg, bands, len(no_evidence))
    for label in store.labels():
        in_label = store.label_mask(label)
        mask = in_label[seen] if len(seen) else np.zeros(0, dtype=bool)
        prefix = f"train/tasks/{label_prefix(store.column, label)}/"
        metrics.update(_metrics(prefix, int(in_label.sum()), p1[mask], pg[mask], bands[mask],
                                int(in_label[no_evidence].sum()) if len(no_evidence) else 0))
    return metrics


def band_indices(rates: np.ndarray) -> np.ndarray:
    """``band`` of each rate as an index into ``BANDS`` (zero <= .05 < low <= .2 < mid < .8 <= high < .95 <= solved)."""
    return (rates > 0.05).astype(int) + (rates > 0.2) + (rates >= 0.8) + (rates >= 0.95)


def _metrics(prefix: str, tasks: int, p1: np.ndarray, pg: np.ndarray, bands: np.ndarray,
             no_evidence: int) -> dict[str, float]:
    out = {f"{prefix}coverage": len(p1) / tasks if tasks else 0.0}
    if len(p1):
        out[f"{prefix}pass_at_1"] = float(p1.mean())
        out[f"{prefix}pass_at_G"] = float(pg.mean())
    counts = np.bincount(bands, minlength=len(BANDS)) if len(bands) else np.zeros(len(BANDS), dtype=int)
    out.update({f"{prefix}bands/{name}": float(n) for name, n in zip(BANDS, counts, strict=True)})
    out[f"{prefix}no_evidence"] = float(no_evidence)
    return out
