"""Per-task tables and step metrics from the statistics: ``platoon tasks show|export`` and ``train/tasks/*``.

Pure functions over a ``TaskStore`` read at a policy version. The export's 26 columns keep the release's order:
``fate_rejected`` comes right after ``fate_lost``, so the five columns after it (``group_size`` to ``newest_version``)
sit one place to the right of 0.3's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from platoon.policy.stats import BANDS, FATES, NO_EVIDENCE_LIMIT, TaskStore, band, informative_at, pass_at

TASK_COLUMNS = (
    "task_id", "entry", "label", "groups", "reported_groups", "attempts", "passes", "informative_groups",
    "all_pass_groups", "all_fail_groups", "uniform_mixed_groups", "uniform_streak", "no_evidence_streak", "drawn",
    "outstanding", *(f"fate_{f}" for f in FATES), "group_size", "pass_rate", "pass_at_G", "informative_at_G",
    "newest_version",
)
SORTS = ("informative", "pass_rate", "groups")


def store_from_snapshot(snapshot: Mapping[str, Any], pool: Sequence[Sequence[Any]] | None = None) -> TaskStore:
    """A store holding ``snapshot``; ``pool`` lists ``(task_id, entry, label)`` in pool order (the snapshot's own
    tasks when not given: then tasks that never settled a group are missing)."""
    tasks = [tuple(t) for t in pool] if pool is not None else [
        (tid, rec.get("entry"), rec.get("label")) for tid, rec in snapshot["tasks"].items()]
    entries = {name: (e["group_size"], e["success_threshold"]) for name, e in snapshot.get("entries", {}).items()}
    store = TaskStore(tasks, entries, column=snapshot.get("column", "_platoon_environment"),
                      group_size=snapshot.get("group_size"))
    store.load_json(snapshot)
    return store


def task_rows(store: TaskStore, version: int) -> list[dict[str, Any]]:
    """One row per task of the pool, in pool order, with exactly ``TASK_COLUMNS``."""
    rows = []
    for task_id in store.ids:
        s = store.task_stats(task_id)
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


def task_metrics(store: TaskStore, version: int) -> dict[str, float]:
    """``train/tasks/*`` at ``version``: over all tasks, then per label (``train/tasks/environment/<label>/``)."""
    metrics = _metrics(store, store.ids, version, "train/tasks/")
    for label in store.labels():
        ids = [t for t in store.ids if store.task_label(t) == label]
        metrics.update(_metrics(store, ids, version, f"train/tasks/environment/{label.replace('/', '--')}/"))
    return metrics


def _metrics(store: TaskStore, ids: Sequence[str], version: int, prefix: str) -> dict[str, float]:
    seen = [t for t in ids if store.task_stats(t).reported_groups > 0]
    out = {f"{prefix}coverage": len(seen) / len(ids) if ids else 0.0}
    bands = dict.fromkeys(BANDS, 0)
    p1, pg = [], []
    for t in seen:
        a, b = store.posterior(t, version)
        p1.append(a / (a + b))
        pg.append(float(pass_at(a, b, store.group_size(store.task_entry(t)))))
        bands[band(p1[-1])] += 1
    if seen:
        out[f"{prefix}pass_at_1"] = sum(p1) / len(p1)
        out[f"{prefix}pass_at_G"] = sum(pg) / len(pg)
    out.update({f"{prefix}bands/{name}": float(n) for name, n in bands.items()})
    out[f"{prefix}no_evidence"] = float(sum(store.counts(t).no_evidence_streak >= NO_EVIDENCE_LIMIT for t in ids))
    return out
