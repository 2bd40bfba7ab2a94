"""Run directories as pandas DataFrames: ``load_run`` and ``compare_runs`` (used by ``platoon report``).

A simulated run and a live run write the same files (platoon.runs), so the frames of one lay beside the other's.
This façade is the only module that imports pandas for reading runs; ``platoon.runs`` stays free of it.

Frames of a :class:`Run`:

- ``metrics``: one row per step, sorted by step; columns ``step``, ``time``, then every metric name in the order
  the log first names it. A step logged twice (a resumed run redoes the steps after its checkpoint) keeps its last
  row. A metric a step did not log is NaN.
- ``events``: one row per line of ``tasks/events.jsonl``, in file order; column ``event`` first, then every field.
- ``checkpoints``: one row per line of ``checkpoints.jsonl``, in file order.

A run directory of platoon 0.4.0 reads too: its ``tasks/events.jsonl`` and ``checkpoints.jsonl`` are read as they are
(a row's ``step`` is its ``batch``), and ``metrics`` is empty, since 0.4.0 wrote its step metrics to no file.
- ``tasks``: one row per task, in the order of its first draw: ``task_id``, ``draws`` (a reissue continues its
  original draw and is not counted again), ``settles``, ``attempts`` (valid rollouts of its settled groups),
  ``passes``, then one count per fate in the order ``fate_consumed, fate_stale, fate_failed, fate_skipped,
  fate_lost, fate_rejected`` (a fate this list does not know gets its own ``fate_<name>`` column after them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from platoon.runs.atomic import PathLike
from platoon.runs.checkpoints import read_checkpoint_rows
from platoon.runs.jsonl import iter_jsonl
from platoon.runs.rundir import RunDir
from platoon.runs.v040 import is_v040_row

#: The fates of a group in the per-task statistics, in their column order (reference 1.2).
FATES = ("consumed", "stale", "failed", "skipped", "lost", "rejected")

#: The leading columns of :attr:`Run.tasks`.
TASK_COUNT_COLUMNS = ("task_id", "draws", "settles", "attempts", "passes")


@dataclass
class Run:
    """One run directory, read: ``lock`` (``{}`` when the run wrote none) and the frames of the module docstring."""

    path: Path
    lock: dict
    metrics: pd.DataFrame
    events: pd.DataFrame
    checkpoints: pd.DataFrame
    tasks: pd.DataFrame

    @property
    def name(self) -> str:
        """The run directory's name (``runs/demo`` -> ``demo``)."""
        return self.path.name

    @property
    def runtime(self) -> str | None:
        """Which runtime wrote the run, as its ``lock.json`` says: ``sim``, ``live``, or None when it does not."""
        runtime = self.lock.get("runtime")
        return runtime if isinstance(runtime, str) else None


def _is_step(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ordered_keys(rows: Iterable[dict], first: Sequence[str]) -> list[str]:
    keys = dict.fromkeys(first)
    for row in rows:
        keys.update(dict.fromkeys(row))
    return list(keys)


def metrics_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """The ``metrics`` frame of rows read from ``metrics.jsonl`` (rows without an integer ``step`` are dropped);
    ``rows`` is read once, so it may stream (``iter_jsonl``): only the last row of each step is held."""
    by_step: dict[int, dict] = {}
    for row in rows:
        if _is_step(row.get("step")):
            by_step[row["step"]] = row  # a redone step: the last row is what the run went on from
    ordered = [by_step[s] for s in sorted(by_step)]
    frame = pd.DataFrame(ordered, columns=_ordered_keys(ordered, ("step", "time")))
    return frame.astype({"step": "int64"})


def events_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """The ``events`` frame of rows read from ``tasks/events.jsonl``."""
    return pd.DataFrame(list(rows), columns=_ordered_keys(rows, ("event",)))


def tasks_frame(events: Iterable[dict]) -> pd.DataFrame:
    """The per-task table of the module docstring, from the event log's rows in file order.

    A fate or settle event is matched to its task through the ``(start, seq)`` of its draw; one whose draw is not
    in the log is left out.
    """
    fates = list(FATES)
    counts: dict[object, dict[str, int]] = {}
    task_of: dict[tuple[object, object], object] = {}

    def row_of(task_id: object) -> dict[str, int]:
        if task_id not in counts:
            counts[task_id] = dict.fromkeys(TASK_COUNT_COLUMNS[1:], 0)
        return counts[task_id]

    for event in events:
        kind = event.get("event")
        key = (event.get("start"), event.get("seq"))
        if kind == "draw" and "task_id" in event:
            task_of[key] = event["task_id"]
            row = row_of(event["task_id"])
            if "reissues" not in event:
                row["draws"] += 1
        elif kind == "settle":
            task_id = event.get("task_id", task_of.get(key))
            if task_id is None:
                continue
            row = row_of(task_id)
            row["settles"] += 1
            row["attempts"] += int(event.get("valid") or 0)
            row["passes"] += int(event.get("passes") or 0)
        elif kind == "fate" and key in task_of and isinstance(event.get("fate"), str):
            fate = event["fate"]
            if fate not in fates:
                fates.append(fate)
            row = row_of(task_of[key])
            row[f"fate_{fate}"] = row.get(f"fate_{fate}", 0) + 1
    columns = [*TASK_COUNT_COLUMNS, *(f"fate_{f}" for f in fates)]
    table = [{"task_id": task_id, **row} for task_id, row in counts.items()]
    frame = pd.DataFrame(table, columns=columns)
    return frame.fillna(0).astype({c: "int64" for c in columns[1:]})


def _with_step(row: dict) -> dict:
    """A checkpoint row with its ``step``: a row of platoon 0.4.0 (run directories of 0.4.0 read as they are,
    ``platoon.runs.v040``) names it ``batch``."""
    if is_v040_row(row) and "step" not in row and _is_step(row.get("batch")):
        return {"step": row["batch"], **row}
    return row


def load_run(path: PathLike, *, events: bool = True) -> Run:
    """Read the run directory at ``path`` into a :class:`Run`.

    Logs that are missing read as empty frames (a run that died early), and lines that do not parse are skipped.
    ``events=False`` leaves ``events`` and ``tasks`` empty and never reads ``tasks/events.jsonl``, the run's largest
    file (hundreds of MB after a few thousand simulated steps): what a summary of the metrics needs
    (``platoon.report``). Raises FileNotFoundError when ``path`` is not a directory, and
    platoon.runs.CorruptFileError when ``lock.json`` exists but cannot be read.
    """
    run_dir = RunDir(path)
    if not run_dir.path.is_dir():
        raise FileNotFoundError(f"{run_dir.path}: not a run directory")
    lock = run_dir.read_lock() if run_dir.lock_path.exists() else {}
    rows = [_with_step(row) for row in read_checkpoint_rows(run_dir)]
    if events:
        event_rows = run_dir.read_events()
        event_frame, task_frame = events_frame(event_rows), tasks_frame(event_rows)
    else:
        event_frame, task_frame = events_frame([]), tasks_frame([])
    return Run(
        path=run_dir.path,
        lock=lock,
        metrics=metrics_frame(iter_jsonl(run_dir.metrics_path)),
        events=event_frame,
        checkpoints=pd.DataFrame(
            rows, columns=_ordered_keys(rows, ("step", "name", "path", "files", "time"))
        ),
        tasks=task_frame,
    )


def compare_runs(runs: Sequence[Run], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per run, side by side: ``steps`` (rows of its metrics), then ``<metric>:median`` and
    ``<metric>:last`` for each metric, in the order given.

    The median is over the steps that logged a number; ``last`` is the value at the last such step; both are NaN
    for a run that never logged the metric. The index is the run's name (its path where two names are equal).
    Raises KeyError for a metric that no run logged (a misspelled name, most likely).
    """
    missing = [m for m in metrics if not any(m in run.metrics.columns for run in runs)]
    if missing:
        raise KeyError(f"no run logged {', '.join(missing)}")
    names = [run.name for run in runs]
    index = [str(run.path) if names.count(run.name) > 1 else run.name for run in runs]
    table = []
    for run in runs:
        row: dict[str, object] = {"steps": len(run.metrics)}
        for metric in metrics:
            values = (
                pd.to_numeric(run.metrics[metric], errors="coerce").dropna()
                if metric in run.metrics.columns
                else pd.Series(dtype="float64")
            )
            row[f"{metric}:median"] = values.median() if len(values) else float("nan")
            row[f"{metric}:last"] = values.iloc[-1] if len(values) else float("nan")
        table.append(row)
    return pd.DataFrame(table, index=pd.Index(index, name="run"))


__all__ = ["FATES", "Run", "compare_runs", "events_frame", "load_run", "metrics_frame", "tasks_frame"]
