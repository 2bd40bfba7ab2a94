"""``platoon tasks show`` and ``platoon tasks export``: the per-task statistics of a run's newest readable checkpoint.

What it owns: finding the newest checkpoint whose statistics snapshot reads back (platoon 0.4.0's layout too), the
rows it gives (``platoon.policy.task_table``), the text ``show`` prints and the file ``export`` writes (through
``platoon.runs.export``, atomically).

Rules it keeps:
- a command's own arguments are checked before the run is read (``UsageError``, exit 64);
- every newer checkpoint passed over on the way is named, one note each, in the order found, before anything else;
- what stops a command after that is a ``TasksError`` (exit 1) worded for the user, or the ``CheckpointError`` of
  a run none of whose checkpoints reads (``ERRORS``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from platoon.config.errors import UsageError
from platoon.policy import SORTS, TASK_COLUMNS, show_table, sort_rows, store_from_snapshot, task_rows
from platoon.runs.checkpoints import CheckpointError, load_latest_checkpoint
from platoon.runs.export import write_csv, write_jsonl, write_parquet
from platoon.runs.rundir import RunDir
from platoon.runs.v040 import is_v040_run, latest_v040_snapshot

Note = Callable[[str], None]
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
"""The export formats, by the suffix that names each."""


class TasksError(RuntimeError):
    """A run whose task statistics cannot be read or written as asked (exit 1)."""


ERRORS = (TasksError, CheckpointError)
"""What a tasks command raises once its arguments are accepted (exit 1)."""


def show(run: Path, *, label: str | None, sort: str, top: int | None, note: Note) -> str:
    """``tasks show``: a line naming the checkpoint and how many tasks (of ``label``) have a settled group, then
    their table sorted by ``sort``, at most ``top`` rows."""
    if sort not in SORTS:
        raise UsageError(f"--sort must be one of {', '.join(SORTS)}, got {sort!r}")
    row, version, rows = read_rows(run, note)
    pool = [r for r in rows if label is None or r["label"] == label]
    shown = sort_rows([r for r in pool if r["groups"] > 0], sort)
    of_label = f" of label {label}" if label is not None else ""
    head = (f"{run}: checkpoint {row.get('name')}, policy version {version}: {len(shown)} of {len(pool)} "
            f"tasks{of_label} have a settled group")
    return head + "\n" + show_table(shown[:top] if top is not None else shown)


def export(run: Path, out: Path, fmt: str | None, *, note: Note) -> None:
    """``tasks export``: every task of the pool, in pool order, with its statistics, written to ``out`` in ``fmt``
    (csv, jsonl or parquet; default: from ``out``'s suffix)."""
    fmt = fmt or FORMATS.get(out.suffix, "")
    if fmt not in FORMATS.values():
        raise UsageError(f"cannot tell the format of {out}: give --format csv|jsonl|parquet")
    _, _, rows = read_rows(run, note)
    try:
        if fmt == "parquet":
            _write_parquet(out, rows)
        elif fmt == "jsonl":
            write_jsonl(out, rows)
        else:
            write_csv(out, rows, TASK_COLUMNS)
    except OSError as exc:
        raise TasksError(f"cannot write {out}: {exc.strerror or exc}") from exc


def _write_parquet(out: Path, rows: list[dict]) -> None:
    import pandas as pd

    try:
        write_parquet(out, pd.DataFrame(rows, columns=list(TASK_COLUMNS)))
    except ImportError as exc:
        raise TasksError(f"Parquet needs pyarrow (pip install 'platoon[parquet]'): {exc}") from exc


def read_rows(run: Path, note: Note) -> tuple[dict, int, list[dict]]:
    """(checkpoint row, policy version, task rows) of the run's newest checkpoint whose snapshot reads back."""
    row, snapshot, pool = latest_snapshot(run, note)
    version = row.get("policy_version", row.get("step", row.get("batch", 0))) or 0
    return row, version, task_rows(store_from_snapshot(snapshot, pool), version)


def latest_snapshot(run: Path, note: Note) -> tuple[dict, dict, list | None]:
    """(checkpoint row, statistics snapshot, pool) of the newest checkpoint whose snapshot reads back; ``note``
    is given every newer one passed over. Raises TasksError, CheckpointError (none reads)."""
    if not run.is_dir():
        raise TasksError(f"{run}: not a run directory")
    if is_v040_run(run):  # platoon 0.4.0's layout: the snapshot lists every task of its pool
        found = latest_v040_snapshot(run)
        for line in found.passed_over:
            note(line)
        return found.row, found.snapshot, None
    loaded = load_latest_checkpoint(run)
    for line in loaded.passed_over:
        note(line)
    snapshot: Any = next((v for k, v in loaded.files.items() if k.startswith("tasks/state-")), None)
    if not isinstance(snapshot, dict):
        raise TasksError(f"{run}: checkpoint {loaded.row.get('name')} holds no statistics snapshot")
    return loaded.row, snapshot, RunDir(run).read_pool()


__all__ = ["ERRORS", "FORMATS", "TasksError", "export", "latest_snapshot", "read_rows", "show"]
