"""A live run's directory: its creation, its full checkpoints' contents, and what a resume starts from.

What this module owns: the live backend's use of ``platoon.runs`` (the only writer of run artifacts). A full
checkpoint ``checkpoints/<step>/`` holds

- ``tasks/dispatch-<step>.json``: the dispatcher's format-2 state (``dispatch_state.state_dict``), whose ``exact``
  section carries the settled, unconsumed groups with their datums, so that a resume trains them first;
- ``tasks/state-<step>.npz``: the per-task statistics' snapshot, columnar (absent once the recorder stopped;
  ``tasks/state-<step>.json`` in a checkpoint of an older release, which reads back as well);
- ``tasks/kept-<step>.json.gz``: the same settled groups as platoon 0.4.0 writes them (``platoon.runs.kept``), when
  there are any, so that 0.4.0 reads the dispatch state too;
- ``trainer.pt``: the trainer's state (model, optimizer, generator, step count) as bytes;

and its row in ``checkpoints.jsonl`` records ``batch`` (the steps done) and ``policy_version`` (the steps that
trained a group), ``start``, the ``tasks`` and ``dispatch`` records ``{file, sha256, format, start}``,
``next_position`` in rule mode, ``clock_s``: the run's clock when the state was taken, and ``logs``: the lengths of
``metrics.jsonl`` and ``tasks/events.jsonl`` then.

Rules it keeps:

- The files and row come from the driver (``SaveCheckpoint``: the same fields as a simulated run's), with
  ``trainer.pt`` and ``clock_s`` added by the live runtime and ``logs`` by its run session (a simulated run keeps
  its clock in its own state file instead).
- The state is captured on the event loop, between two dispatcher calls (every event drained and flushed, so the
  log lengths match the state); only the writing may happen off the loop.
- A resume takes the newest checkpoint whose trainer state reads back (``load_latest_checkpoint``; each newer one
  passed over is a note), starts number ``max(start named by any row) + 1``, and cuts both logs back to the lengths
  its row recorded: what the killed start wrote after its checkpoint (draws, fates, steps) is done again by the
  resumed one, so the logs end with every step once and every draw key with exactly one fate, a reissue's old key
  excepted (its ``draw`` event names it in ``reissues``).
- Only a broken part falls back: statistics that do not read come from the newest older checkpoint whose
  statistics do (``ResumePoint.snapshot_from``; none: they start empty), and a dispatch state that does not read
  costs its outstanding draws (the resume gives them ``lost``); the trainer state and the steps are the newest's.
  What did not read is in ``ResumePoint.state_lost``.
- The run's writer lock is held from ``create`` or ``claim`` to ``release`` (platoon.runs.writer).
- The resumed start's clock begins at the row's ``clock_s`` (at or after every row and event the logs keep), so
  ``metrics.jsonl``'s ``time`` never drops; a row without it (platoon 0.4.0 and older) begins at 0.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from platoon.runs import (
    CheckpointError,
    LoadedCheckpoint,
    RunDir,
    kept_rows,
    load_latest_checkpoint,
    read_checkpoint_file,
    read_checkpoint_rows,
    stats_file_name,
)

TRAINER_FILE = "trainer.pt"
#: The checkpoint files a live resume can do without: each only costs its own part (see the module docstring).
STATS_FILE, DISPATCH_FILE = "tasks/state-*", "tasks/dispatch-*.json"

__all__ = ["LiveRunDir", "ResumePoint", "TRAINER_FILE", "clock_of", "next_start_number"]


def next_start_number(rows: list[dict]) -> int:
    """One more than the largest start any checkpoint row names (its own, its tasks' or its dispatch record's)."""
    starts = [0]
    for row in rows:
        for value in (row.get("start"), (row.get("tasks") or {}).get("start"),
                      (row.get("dispatch") or {}).get("start")):
            if isinstance(value, int) and not isinstance(value, bool):
                starts.append(value)
    return max(starts) + 1


def clock_of(row: Mapping[str, Any]) -> tuple[float, str | None]:
    """The run's clock that the checkpoint ``row`` recorded (``clock_s``), and a note when it cannot be used: 0
    without a note for a row that has none (platoon 0.4.0 and older), 0 with a note for one that is not seconds."""
    value = row.get("clock_s")
    if value is None:
        return 0.0, None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value), None
    return 0.0, f"checkpoint row's clock_s {value!r} is not a number of seconds: the run's clock begins again at 0"


@dataclass(frozen=True)
class ResumePoint:
    """What a resume goes on from: the checkpoint's step, its dispatch state, statistics and trainer state, the new
    start number, a note for each newer checkpoint passed over, and the run's clock at the checkpoint (``clock_s``,
    where the resumed start's clock begins; ``clock_of``)."""

    step: int
    name: str
    dispatch: Mapping[str, Any] | None
    snapshot: Mapping[str, Any] | None
    trainer_state: bytes | None
    start: int
    notes: list[str]
    row: dict
    clock_s: float = 0.0
    #: The checkpoint whose statistics ``snapshot`` is: this one's name, an older one's when its own did not read,
    #: or None (no snapshot).
    snapshot_from: str | None = None
    #: Files of this checkpoint that did not read back (statistics, dispatch state): name -> the problem.
    state_lost: Mapping[str, str] = field(default_factory=dict)

    @property
    def version(self) -> int:
        """The policy version the checkpoint's weights are: its row's ``policy_version`` (fewer than its steps when
        some step trained no group), else its step."""
        version = self.row.get("policy_version")
        return version if isinstance(version, int) and not isinstance(version, bool) else self.step


class LiveRunDir:
    """The run directory of one start of a live run: created, or claimed for a resume, and what a resume starts from
    (its writes are the run session's: ``platoon.runs.session``)."""

    def __init__(self, path: str | os.PathLike[str] | RunDir, *, keep: int | None = None) -> None:
        self.rd = path if isinstance(path, RunDir) else RunDir(path)
        self.path = self.rd.path
        self.keep = keep  # checkpoint.keep_recovery: the recovery checkpoints a run session keeps (None: every one)

    # ------------------------------------------------------------------------------------------- creating
    @classmethod
    def create(cls, path: str | os.PathLike[str], *, config: dict, components: list[dict],
               pool: list[tuple[str, str | None, str | None]], keep: int | None = None,
               steps: int | None = None) -> LiveRunDir:
        """A new run directory (``path`` must not exist or be empty) with its lock.json and tasks/pool.json, its
        writer lock held (RunBusyError, FileExistsError)."""
        with RunDir.create(path).undone_on_failure() as rd:
            rd.write_lock(config, components, {"runtime": "live", "steps": steps})
            rd.write_pool(pool)
        return cls(rd, keep=keep)

    @classmethod
    def claim(cls, path: str | os.PathLike[str]) -> LiveRunDir:
        """The existing run ``path`` for a resume, its writer lock taken (RunBusyError; CorruptFileError when it
        holds no lock.json)."""
        return cls(RunDir.claim(path))

    def release(self) -> None:
        """Give the writer lock back (idempotent)."""
        self.rd.release()

    def resume_point(self) -> ResumePoint:
        """The newest checkpoint whose trainer state reads back (CheckpointError when none does), as a
        ``ResumePoint``; its statistics or dispatch state may have fallen back alone (see the module docstring)."""
        ckpt: LoadedCheckpoint = load_latest_checkpoint(self.rd, optional=(STATS_FILE, DISPATCH_FILE))
        name = ckpt.name
        dispatch = ckpt.files.get(f"tasks/dispatch-{name}.json")
        stats_name = stats_file_name(ckpt.row, name)
        snapshot = ckpt.files.get(stats_name)
        snapshot_from = name if isinstance(snapshot, dict) else None
        if stats_name in ckpt.broken:
            snapshot, snapshot_from = self._older_snapshot(ckpt.row)
        trainer = ckpt.files.get(TRAINER_FILE)
        clock_s, note = clock_of(ckpt.row)
        return ResumePoint(
            step=ckpt.step, name=name,
            dispatch=dispatch if isinstance(dispatch, dict) else None,
            snapshot=snapshot if isinstance(snapshot, dict) else None,
            trainer_state=trainer if isinstance(trainer, bytes) else None,
            start=next_start_number(read_checkpoint_rows(self.rd)),
            notes=[*ckpt.passed_over, *([note] if note else [])], row=ckpt.row, clock_s=clock_s,
            snapshot_from=snapshot_from, state_lost=dict(ckpt.broken))

    def _older_snapshot(self, row: Mapping[str, Any]) -> tuple[dict | None, str | None]:
        """The statistics of the newest checkpoint older than ``row`` whose statistics read back, and its name."""
        rows = kept_rows(self.rd)  # newest first
        older = rows[next((i for i, r in enumerate(rows) if r == row), len(rows)) + 1:]
        for r in older:
            name = r.get("name")
            if not isinstance(name, str):
                continue
            try:
                snapshot = read_checkpoint_file(self.rd, r, stats_file_name(r, name))
            except CheckpointError:
                continue
            if isinstance(snapshot, dict):
                return snapshot, name
        return None, None

    def cut_logs(self, row: Mapping[str, Any]) -> None:
        """Cut the run's logs back to the lengths the checkpoint ``row`` recorded (``RunDir.cut_logs``)."""
        self.rd.cut_logs(row.get("logs") or {})
