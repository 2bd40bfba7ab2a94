"""A run session: one object that carries out a driver's writes on a run directory, for every runtime.

What this module owns: the writing half of a start of a run. A runtime hands its session what the driver decided
(``WriteRow``, ``SaveCheckpoint``, ``Finish``) and what its outbox holds; the session writes them, in the run
directory's formats (docs/run-directory.md), and nothing else writes the logs, checkpoints or the end. Rules it
keeps:

- The outbox: events go to ``tasks/events.jsonl`` (kept in ``events`` when the session has no directory), infos and
  warnings to ``log(level, message)``, in the order the driver gave them.
- A row is written whole, then the outbox is drained (``WriteRow`` rows are kept in ``rows`` too and handed to
  ``on_row``).
- A checkpoint is written in two halves: ``seal`` (on the caller's thread, right when the decision is carried out:
  the outbox drained, the trace flushed to whole lines, and the lengths of the logs recorded, so that they match the
  state the driver captured with the decision; a resume cuts the logs back to them) and ``write`` (the files, which
  may be written off the caller's thread). The runtime's own files and row fields (``sim-<name>.json``,
  ``trainer.pt``, ``clock_s``) join the driver's; 0.4.0's kept-groups file is added beside the dispatch state.
- ``Finish`` records the run's end in ``lock.json`` (its ``finished``), after a last drain.
- A row written to ``metrics.jsonl`` goes to the run's trackers too (``platoon.runs.trackers``), which ``close``
  closes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from platoon.policy import Finish, Outbox, SaveCheckpoint, WriteRow
from platoon.runs.checkpoints import save_checkpoint
from platoon.runs.jsonl import JsonlWriter
from platoon.runs.kept import add_kept_file
from platoon.runs.rundir import RunDir
from platoon.runs.trace import TraceWriter
from platoon.runs.trackers import Trackers

Logger = Callable[[str, str], None]


def python_log(name: str) -> Logger:
    """A ``log(level, message)`` onto Python's logger ``name``: warnings as warnings, the rest as infos."""
    logger = logging.getLogger(name)
    return lambda level, message: logger.log(logging.WARNING if level == "warning" else logging.INFO, message)


@dataclass(frozen=True)
class SealedCheckpoint:
    """A checkpoint whose log lengths are recorded: what ``RunSession.write`` writes."""

    done: int
    files: dict[str, object]
    row: dict[str, Any]
    permanent: bool


class RunSession:
    """The writes of one start of a run on ``rd`` (None: rows and events kept in memory, no checkpoint written).
    ``keep``: the recovery checkpoints kept (``checkpoint.keep_recovery``); ``trace``: the run's timeline writer,
    flushed before a checkpoint's lengths are taken and closed with the session."""

    def __init__(self, rd: RunDir | None, *, log: Logger, keep: int | None = None, trace: TraceWriter | None = None,
                 on_row: Callable[[dict], None] | None = None, trackers: Trackers | None = None) -> None:
        self.rd, self.log, self.keep, self.trace, self.on_row = rd, log, keep, trace, on_row
        self.trackers = trackers
        self.rows: list[dict] = []
        self.events: list[dict] = []
        self._metrics: JsonlWriter | None = None
        self._events: JsonlWriter | None = None

    # --------------------------------------------------------------------------------------------- the outbox
    def drain(self, outbox: Outbox) -> None:
        """Write the outbox's events and log its infos and warnings."""
        if outbox.events:
            if self.rd is None:
                self.events.extend(outbox.events)
            else:
                if self._events is None:
                    self._events = self.rd.events_writer()
                for event in outbox.events:
                    self._events.write(event)
        for message in outbox.infos:
            self.log("info", message)
        for message in outbox.warnings:
            self.log("warning", message)

    # ------------------------------------------------------------------------------------------- decisions
    def write_row(self, decision: WriteRow, outbox: Outbox) -> None:
        """Append the decision's row to ``metrics.jsonl``, then drain ``outbox``."""
        if self.rd is not None:
            if self._metrics is None:
                self._metrics = self.rd.metrics_writer()
            self._metrics.write(decision.row)
            if self.trackers is not None:
                self.trackers.write(decision.row)
        self.rows.append(decision.row)
        self.drain(outbox)
        if self.on_row is not None:
            self.on_row(decision.row)

    def seal(self, decision: SaveCheckpoint, outbox: Outbox, *, files: Mapping[str, object] | None = None,
             row: Mapping[str, Any] | None = None) -> SealedCheckpoint | None:
        """The first half of carrying out ``decision``, at once: the runtime's ``files`` and ``row`` fields join
        the driver's, the outbox is drained and the logs' lengths recorded. None without a run directory."""
        self.drain(outbox)
        if self.rd is None:
            return None
        all_files = {**decision.files, **(files or {})}
        full_row = {**decision.row, **(row or {})}
        add_kept_file(all_files, full_row, decision.name)
        if self.trace is not None:
            self.trace.flush()  # whole lines before the lengths: a resume cuts the trace back to this point
        full_row["logs"] = self.rd.log_lengths()
        return SealedCheckpoint(decision.done, all_files, full_row, decision.permanent)

    def write(self, sealed: SealedCheckpoint | None, *, files: Mapping[str, object] | None = None) -> None:
        """The second half: write the sealed checkpoint (with ``files`` the runtime had only now, such as the
        trainer's state), kept for good when permanent, else among the newest ``keep``."""
        if sealed is None or self.rd is None:
            return
        save_checkpoint(self.rd, sealed.done, {**sealed.files, **(files or {})}, sealed.row, keep=self.keep,
                        permanent=sealed.permanent)

    def save(self, decision: SaveCheckpoint, outbox: Outbox, *, files: Mapping[str, object] | None = None,
             row: Mapping[str, Any] | None = None) -> None:
        """Seal and write ``decision`` at once (a runtime whose checkpoint files are all at hand)."""
        self.write(self.seal(decision, outbox, files=files, row=row))

    def finish(self, decision: Finish, outbox: Outbox) -> None:
        """The plan is done: drain, and record the end in ``lock.json``."""
        self.drain(outbox)
        if self.rd is not None:
            self.rd.mark_finished(decision.steps, decision.start)

    def close(self) -> None:
        """Close the logs, the trace and the trackers (the run directory's lock is its owner's)."""
        if self.trackers is not None:
            self.trackers.close()
            self.trackers = None
        for writer in (self._metrics, self._events):
            if writer is not None:
                writer.close()
        self._metrics = self._events = None
        if self.trace is not None:
            self.trace.close()


__all__ = ["RunSession", "SealedCheckpoint", "python_log"]
