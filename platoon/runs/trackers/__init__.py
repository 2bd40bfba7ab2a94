"""Trackers: each ``metrics.jsonl`` row also goes to TensorBoard, Weights & Biases or MLflow (docs/tracking.md).

``open_trackers(rd, stats, runtime=, log=)`` starts the trackers a config chooses (``platoon.config.tracking``) for
one start of a run, simulated or live; the run session hands it each row it writes (``write``) and closes it with
the run (``close``). Rules it keeps:

- ``metrics.jsonl`` stays the source of truth: a tracker gets the rows the run writes there, in order, on a thread
  per tracker (``platoon-tracker-<name>``), so a tracker that is slow, or a server that does not answer, never holds
  up a step, nor another tracker. Each gets every row's metrics under the same names (MLflow's refused characters replaced: ``@`` as ``_at_``),
  a value that is null (not a finite number) left out, the row's ``step`` as its step; the run's config (lock.json's
  ``config``) as its parameters; platoon's tags (the runtime, its time axis, a sweep's name) beside the user's;
- ``RUN/trackers.json`` keeps each tracker's run id and how many rows of ``metrics.jsonl`` it has taken (rewritten
  after each batch it took): a resume logs to the same tracker run and sends each tracker the rows it lacks, and
  only those. TensorBoard and MLflow count the rows they hold in their own files as they open (every row has a
  ``time``), so a kill between a row taken and its count recorded sends nothing twice; W&B hands its rows to its
  own process and cannot be asked, so a kill in that instant (a few milliseconds a step) sends W&B that batch again. The rows a resume writes again (a live run's steps after its checkpoint) keep, in the trackers, the
  values they got first; a simulated run's replay writes the same rows, so its trackers hold ``metrics.jsonl``
  (but for the sampler's ``decision_ms``, timed on the host again);
- a run platoon 0.4.0 began, resumed here, logs to the W&B run its newest checkpoint names (``wandb_run_id``);
- a tracker that fails, starting or taking a row (a full disk, a server that does not answer), is reported once (a
  warning naming it and the error) and left alone for the rest of this start: training goes on, ``metrics.jsonl``
  loses nothing, and the next start sends it the rows it missed;
- ``close`` waits at most ``stats.close_timeout_seconds`` for the trackers to take their rows and end their runs;
  a tracker still busy then is said, with the rows it has not taken. A resume sends them: a ``--resume`` of a run
  that is finished (killed or timed out while its trackers caught up after its last step) runs no step but sends
  each tracker the rows it lacks (``catch_up``).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from platoon.config.tracking import chosen_loggers
from platoon.runs.atomic import write_json_atomic

__all__ = ["STATE_FILE", "TrackedRun", "Tracker", "Trackers", "catch_up", "open_trackers"]

STATE_FILE = "trackers.json"
Logger = Callable[[str, str], None]
Row = tuple[int, Mapping[str, float]]  # a step and its metrics


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker's run is named and holds: the run directory, the runtime (``live`` or ``sim``), the
    experiment, the run's name, its group (a sweep's name), the config and platoon's tags."""

    path: Path
    runtime: str
    experiment: str
    name: str
    group: str | None
    params: Mapping[str, Any]

    @property
    def time_axis(self) -> str:
        return "simulated seconds" if self.runtime == "sim" else "wall-clock seconds"

    @property
    def tags(self) -> tuple[str, ...]:
        """platoon's tags: the runtime and its time axis (``time`` is simulated in a simulated run)."""
        return ("simulated", "time:simulated") if self.runtime == "sim" else ("live", "time:wall-clock")


class Tracker(Protocol):
    """One tracker's run. ``open`` starts or continues it (``kept``: what it kept at its last start, empty at the
    first) and returns what to keep, with ``rows``, the rows of ``metrics.jsonl`` it holds, when it can read that
    from its own store (else the count kept is used); ``log`` takes a batch of rows in order, whole or (raising) none
    of it, as far as the tracker can tell, so that the count kept stays exact; ``close`` ends it. Each may raise: the
    fan-out reports it and leaves the tracker alone."""

    name: str

    def open(self, run: TrackedRun, kept: Mapping[str, Any], log: Logger) -> dict[str, Any]: ...

    def log(self, rows: Sequence[Row]) -> None: ...

    def close(self) -> None: ...


def open_trackers(rd: Any, stats: Any, *, runtime: str, log: Logger, group: str | None = None) -> Trackers | None:
    """The trackers ``stats`` chooses for a start of the run in ``rd`` (a ``RunDir`` whose lock.json is written),
    or None when it chooses none. ``group``: a sweep's name (a resumed point finds it kept)."""
    names = chosen_loggers(stats.loggers, stats.wandb)
    if not names:
        return None
    trackers: list[Tracker] = []
    for name in names:
        if name == "tensorboard":
            from platoon.runs.trackers.tensorboard import TensorBoardTracker

            trackers.append(TensorBoardTracker())
        elif name == "wandb":
            from platoon.runs.trackers.wandb import WandbTracker

            trackers.append(WandbTracker(stats.wandb))
        else:
            from platoon.runs.trackers.mlflow import MlflowTracker

            trackers.append(MlflowTracker(stats.mlflow))
    kept = _read_state(rd.path / STATE_FILE)
    v040_id = _v040_wandb_run(rd.path)
    if "wandb" not in kept and v040_id is not None:  # a 0.4.0 run resumed here goes on in its W&B run
        kept["wandb"] = {"run_id": v040_id}
    group = group or kept.get("group")
    run = TrackedRun(rd.path, runtime, stats.experiment_name if group is None else group,
                     stats.trial_name if group is None else rd.path.name, group, rd.read_lock().get("config", {}))
    backlog = [_metrics(row) for row in rd.read_metrics()]
    return Trackers(run, trackers, kept, backlog, log=log, close_timeout_s=stats.close_timeout_seconds)


def catch_up(rd: Any, stats: Any, *, runtime: str, log: Logger) -> None:
    """Send the trackers of a finished run the rows of ``metrics.jsonl`` they lack, and end their runs: a run
    killed while its trackers caught up after its last step, or whose ``close`` timed out, is finished, so no
    resume runs it again. Opens none when ``RUN/trackers.json`` counts every row taken by every tracker chosen."""
    names = chosen_loggers(stats.loggers, stats.wandb)
    kept = _read_state(rd.path / STATE_FILE)
    rows = len(rd.read_metrics())
    if all(isinstance(kept.get(n), dict) and kept[n].get("rows") == rows for n in names):
        return
    trackers = open_trackers(rd, stats, runtime=runtime, log=log)
    if trackers is not None:
        trackers.close()


class Trackers:
    """The fan-out of one start of a run (see the module's doc): a thread and a queue per tracker, so that one that
    is slow holds up no other."""

    def __init__(self, run: TrackedRun, trackers: Sequence[Tracker], kept: Mapping[str, Any],
                 backlog: Sequence[Row], *, log: Logger, close_timeout_s: float) -> None:
        self.run, self.log, self.close_timeout_s = run, log, close_timeout_s
        self._state: dict[str, Any] = {"format": 1, "group": run.group}
        self._state.update({t.name: dict(kept[t.name]) for t in trackers if isinstance(kept.get(t.name), dict)})
        self._lock = threading.Lock()  # the state, written by every lane
        self._save_failed = False
        self._written = len(backlog)
        self._lanes = [_Lane(self, tracker, backlog) for tracker in trackers]

    def write(self, row: Mapping[str, Any]) -> None:
        """A row the run wrote to ``metrics.jsonl``, to go to every tracker (never blocks, never raises)."""
        item = (self._written, _metrics(row))
        self._written += 1
        for lane in self._lanes:
            lane.queue.put(item)

    def close(self) -> None:
        """Let the trackers take what is queued and end their runs, ``close_timeout_s`` at most in all."""
        for lane in self._lanes:
            lane.queue.put(None)
        deadline = time.monotonic() + self.close_timeout_s
        for lane in self._lanes:
            lane.thread.join(max(0.0, deadline - time.monotonic()))
        busy = [f"{lane.tracker.name}: {self._written - lane.taken} row(s) not taken" for lane in self._lanes
                if lane.thread.is_alive()]
        if busy:
            self.log("warning", f"trackers: still busy after {self.close_timeout_s:g} s ({', '.join(busy)}); a resume "
                                "(platoon train --resume, platoon simulate --resume) sends them the rows they lack")

    def kept(self, name: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._state.get(name, {}))

    def keep(self, name: str, values: Mapping[str, Any]) -> None:
        """Record ``values`` of tracker ``name`` in ``RUN/trackers.json``."""
        with self._lock:
            self._state[name] = {**self._state.get(name, {}), **values}
            try:
                write_json_atomic(self.run.path / STATE_FILE, self._state)
            except (OSError, ValueError) as exc:
                if not self._save_failed:
                    self._save_failed = True
                    self.log("warning", f"trackers: {STATE_FILE} could not be written ({exc}); a resume may send "
                                        "trackers rows they have")

    def failed(self, name: str, what: str, exc: BaseException) -> None:
        self.log("warning", f"tracker {name} {what} ({type(exc).__name__}: {exc}); the run goes on without it, "
                            "metrics.jsonl holds every row, and a resume sends it the rows it missed")


class _Lane:
    """One tracker's thread: it starts the tracker's run, hands it the rows it lacks, batched as they queue, and
    ends its run."""

    def __init__(self, owner: Trackers, tracker: Tracker, backlog: Sequence[Row]) -> None:
        self.owner, self.tracker = owner, tracker
        self.taken = int(owner.kept(tracker.name).get("rows", 0))
        self.queue: queue.Queue = queue.Queue()
        for i, row in enumerate(backlog):
            self.queue.put((i, row))
        self.thread = threading.Thread(target=self._serve, name=f"platoon-tracker-{tracker.name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        name, owner = self.tracker.name, self.owner
        try:
            opened = self.tracker.open(owner.run, owner.kept(name), owner.log)
        except Exception as exc:  # noqa: BLE001 - any tracker's failure is reported, never the run's
            owner.failed(name, "could not start", exc)
            return
        self.taken = int(opened.pop("rows", self.taken))  # what the tracker says it holds, where it can tell
        owner.keep(name, {**opened, "rows": self.taken})
        done = False
        while not done:
            batch = [self.queue.get()]
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            done = batch[-1] is None
            items = [item for item in batch if item is not None]
            rows = [row for i, row in items if i >= self.taken]
            if not rows:
                continue
            try:
                self.tracker.log(rows)
            except Exception as exc:  # noqa: BLE001
                owner.failed(name, "stopped taking rows", exc)
                return
            self.taken = max(i for i, _ in items) + 1
            owner.keep(name, {"rows": self.taken})
        try:
            self.tracker.close()
        except Exception as exc:  # noqa: BLE001
            owner.failed(name, "could not end its run", exc)


def _metrics(row: Mapping[str, Any]) -> Row:
    """A row's step and its metrics that are numbers (null, not a finite number, left out)."""
    return int(row["step"]), {k: float(v) for k, v in row.items()
                              if k != "step" and isinstance(v, int | float) and not isinstance(v, bool)}


def _v040_wandb_run(path: Path) -> str | None:
    """The W&B run id of the newest checkpoint platoon 0.4.0 wrote in the run directory (0.4.0 logged its metrics
    to W&B only), or None."""
    from platoon.runs.jsonl import read_jsonl

    try:
        rows = read_jsonl(path / "checkpoints.jsonl")
    except (OSError, ValueError):
        return None
    ids = [r["wandb_run_id"] for r in rows if isinstance(r.get("wandb_run_id"), str) and r["wandb_run_id"]]
    return ids[-1] if ids else None


def _read_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}
