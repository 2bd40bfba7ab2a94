"""The run directory: where each artifact of a run lives, and the lock file.

```
RUN/
  lock.json            config as resolved, every component, versions, and lists appended during the run
  writer.lock          the writer lock: who writes the run now (platoon.runs.writer)
  metrics.jsonl        one JSON object per step: {"step": n, "time": s, "<metric name>": value, ...}
  tasks/events.jsonl   draw and fate events of every group, in order
  checkpoints.jsonl    one row per full checkpoint (see platoon.runs.checkpoints)
  checkpoints/<step:06d>/   a full checkpoint's files
  report/              what `platoon report` draws
```

The simulator and the live backend write the same layout through this class. ``lock.json`` is state: every write of
it is atomic (platoon.runs.atomic). The ``*.jsonl`` files are append-only logs (platoon.runs.jsonl). A RunDir that
writes (``create``, ``claim``) holds the run's writer lock until ``release``: one writer at a time.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import platoon
from platoon.runs.atomic import CorruptFileError, PathLike, read_json_state, write_json_atomic
from platoon.runs.jsonl import JsonlWriter, read_jsonl
from platoon.runs.trace import TraceWriter
from platoon.runs.writer import WRITER_FILE, WriterLock

#: The keys write_lock always writes; ``extra`` and append_lock_list may not use them.
LOCK_BASE_KEYS = ("platoon_version", "python_version", "config", "components", "created")

#: Lists that a run appends to lock.json while it runs (reference: 1.10 and 6.4); a rewrite of the lock by a
#: resumed start keeps them, so that what an earlier start recorded is not lost. ``finished`` gets an entry each time
#: the run reaches the end of its plan (``mark_finished``).
LOCK_LISTS = ("sampling_changed", "tasks_state_lost", "finished")

#: The logs whose lengths a checkpoint records (``log_lengths``), by their names in the row's ``logs``; a resume cuts
#: each back to that length (``cut_logs``).
LOGS = ("metrics.jsonl", "tasks/events.jsonl", "trace.json")
#: The logs a resume needs whole (``platoon.runs.resume.check_logs``): the trace is a view of the run, and a lost one
#: does not stop it.
NEEDED_LOGS = ("metrics.jsonl", "tasks/events.jsonl")


class NotARunDirectory(CorruptFileError):
    """A path given as a run that is none: it holds no ``lock.json`` (or does not exist)."""

    def __init__(self, path: PathLike) -> None:
        super().__init__(path, "not a run directory (no lock.json)" if Path(path).is_dir() else "no such directory")


class RunDir:
    """Paths and readers/writers of one run directory. Constructing one touches nothing on disk."""

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self._created = False  # set by create, with the topmost directory it made (None: it was given one, empty)
        self._made: Path | None = None
        self.writer: WriterLock | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    @classmethod
    def create(cls, path: PathLike, *, exist_ok: bool = False, command: str | None = None) -> RunDir:
        """Make the run directory (and ``tasks/``, ``checkpoints/``), parents included, holding its writer lock.

        The lock is taken before the directory is looked at, so two processes creating the same run cannot both
        find it empty: the second gets RunBusyError (while the first holds it) or FileExistsError (after). A
        directory that already exists and holds anything but an empty ``writer.lock`` raises FileExistsError unless
        ``exist_ok``; an existing empty directory is used as is. ``command`` is what the lock's record names.
        """
        root = Path(path)
        if root.exists() and not root.is_dir():
            raise FileExistsError(f"{root}: exists and is not a directory")
        made = root
        while not made.parent.exists() and made.parent != made:
            made = made.parent
        existed = root.exists()
        root.mkdir(parents=True, exist_ok=True)
        run = cls(root)
        had_lock_file = (root / WRITER_FILE).exists()
        run.writer = WriterLock.acquire(root, command=command)
        try:
            if not exist_ok and any(p.name != WRITER_FILE for p in root.iterdir()):
                if not had_lock_file:  # a directory that is no run is left as it was (unlinked while held)
                    (root / WRITER_FILE).unlink(missing_ok=True)
                raise FileExistsError(f"{root}: the run directory exists and is not empty")
            run._created, run._made = True, (made if not existed else None)
            run.tasks_dir.mkdir(exist_ok=True)
            run.checkpoints_dir.mkdir(exist_ok=True)
        except BaseException:
            run.release()
            raise
        return run

    def discard(self) -> None:
        """Undo ``create``: give the writer lock back and remove the directories it made (parents included), or empty
        the directory it was given empty, so that a run that failed before its first step leaves nothing in the way
        of the next try. Only for a RunDir that ``create`` returned (ValueError otherwise); errors removing are
        ignored."""
        if not self._created:
            raise ValueError(f"{self.path}: discard undoes create, and this RunDir was not created")
        self.release()
        made = self._made
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        elif self.path.is_dir():
            for child in self.path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)

    @contextmanager
    def undone_on_failure(self) -> Iterator[RunDir]:
        """Around the first writes of a run ``create`` made: a failure ``discard``s it (nothing is left in the way of
        the next try); an interruption (KeyboardInterrupt, SystemExit) only gives the lock back, so that a launch
        checkpoint already written resumes."""
        try:
            yield self
        except Exception:
            self.discard()
            raise
        except BaseException:
            self.release()
            raise

    @classmethod
    def claim(cls, path: PathLike, *, command: str | None = None) -> RunDir:
        """The existing run directory ``path``, for writing: its writer lock taken (RunBusyError when another
        process holds it). A directory that holds no ``lock.json`` raises NotARunDirectory (a CorruptFileError) and
        is left untouched."""
        run = cls(path)
        if not run.lock_path.exists():  # not a run: say so before a writer.lock is made in it
            raise NotARunDirectory(run.path)
        run.read_lock()
        run.writer = WriterLock.acquire(run.path, command=command)
        return run

    def release(self) -> None:
        """Give the writer lock back (idempotent; a RunDir that holds none does nothing)."""
        if self.writer is not None:
            self.writer.release()
            self.writer = None

    # paths ------------------------------------------------------------------------------------------------------

    @property
    def lock_path(self) -> Path:
        return self.path / "lock.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def tasks_dir(self) -> Path:
        return self.path / "tasks"

    @property
    def events_path(self) -> Path:
        return self.tasks_dir / "events.jsonl"

    @property
    def checkpoints_path(self) -> Path:
        """``checkpoints.jsonl``, the index of full checkpoints."""
        return self.path / "checkpoints.jsonl"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint_dir(self, step: int) -> Path:
        """``checkpoints/<step:06d>``."""
        return self.checkpoints_dir / checkpoint_name(step)

    @property
    def report_dir(self) -> Path:
        return self.path / "report"

    # lock.json --------------------------------------------------------------------------------------------------

    def write_lock(self, config: dict, components: list[dict], extra: dict | None = None) -> dict:
        """Write ``lock.json`` atomically and return what was written.

        The object is ``{platoon_version, python_version, config, components, created, **extra}``; ``created`` is
        the UTC time of this write (ISO 8601). When a lock already exists, its :data:`LOCK_LISTS` entries are kept
        unless ``extra`` sets them. ``extra`` may not reuse a base key (ValueError); everything must be JSON-safe.
        """
        extra = dict(extra or {})
        clash = sorted(set(extra) & set(LOCK_BASE_KEYS))
        if clash:
            raise ValueError(f"lock.json extra keys clash with its own: {', '.join(clash)}")
        lock: dict = {
            "platoon_version": platoon.__version__,
            "python_version": platform.python_version(),
            "config": config,
            "components": components,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if self.lock_path.exists():
            try:
                old = self.read_lock()
            except CorruptFileError:
                old = {}
            for key in LOCK_LISTS:
                if key in old and key not in extra:
                    lock[key] = old[key]
        lock.update(extra)
        write_json_atomic(self.lock_path, lock)
        return lock

    def read_lock(self) -> dict:
        """The parsed ``lock.json``. Raises CorruptFileError when it is missing, unreadable or not an object."""
        lock = read_json_state(self.lock_path)
        if not isinstance(lock, dict):
            raise CorruptFileError(self.lock_path, f"not a JSON object but {type(lock).__name__}")
        return lock

    def append_lock_list(self, key: str, item: object) -> dict:
        """Append ``item`` to the list ``lock[key]`` (created when absent), rewriting ``lock.json`` atomically.

        Used for ``sampling_changed`` and ``tasks_state_lost``. Returns the new lock. Raises CorruptFileError when
        the lock cannot be read, ValueError when ``key`` is a base key or holds something other than a list.
        """
        if key in LOCK_BASE_KEYS:
            raise ValueError(f"lock.json key {key!r} is not a list that a run appends to")
        lock = self.read_lock()
        current = lock.get(key, [])
        if not isinstance(current, list):
            raise ValueError(f"{self.lock_path}: {key} is a {type(current).__name__}, not a list")
        lock[key] = [*current, item]
        write_json_atomic(self.lock_path, lock)
        return lock

    def mark_finished(self, steps: int, start: int | None = None) -> dict:
        """Record that the run reached the end of its plan of ``steps`` steps: an entry ``{steps, start, time}`` in
        ``lock.json``'s ``finished`` list (``time`` in UTC, ISO 8601). Returns the new lock."""
        return self.append_lock_list("finished", {"steps": steps, "start": start,
                                                  "time": datetime.now(UTC).isoformat(timespec="seconds")})

    # logs -------------------------------------------------------------------------------------------------------

    def metrics_writer(self) -> JsonlWriter:
        """A writer appending to ``metrics.jsonl``; each row is one step: ``{"step", "time", <metric>: value}``.

        OS errors raise: a run without its metrics has failed.
        """
        return JsonlWriter(self.metrics_path)

    @property
    def trace_path(self) -> Path:
        return self.path / "trace.json"

    def trace_writer(self, *, group_every: int = 1, max_events: int | None = None, enabled: bool = True) -> TraceWriter:
        """A writer appending to ``trace.json`` (``platoon.runs.trace``); an OS error warns once and stops it."""
        return TraceWriter(self.trace_path, group_every=group_every, max_events=max_events, enabled=enabled)

    def events_writer(self) -> JsonlWriter:
        """A writer appending to ``tasks/events.jsonl``; an OS error warns once and stops the log (reference 1.9)."""
        return JsonlWriter(self.events_path, on_error="warn")

    def log_path(self, name: str) -> Path:
        """The path of the log ``name`` (one of :data:`LOGS`)."""
        if name not in LOGS:
            raise ValueError(f"{name!r} is not one of the run's logs ({', '.join(LOGS)})")
        return self.path / name

    def log_lengths(self) -> dict[str, int]:
        """The byte length of each log (0 when absent), for a checkpoint's row."""
        lengths = {}
        for name in LOGS:
            try:
                lengths[name] = self.log_path(name).stat().st_size
            except FileNotFoundError:
                lengths[name] = 0
        return lengths

    def cut_logs(self, lengths: Mapping[str, object]) -> None:
        """Cut each log back to the length a checkpoint's row recorded (``lengths``, the row's ``logs``): what a
        resume that replays from that checkpoint writes again. A log without a recorded length is left as it is."""
        for name in LOGS:
            length = lengths.get(name)
            path = self.log_path(name)
            if isinstance(length, int) and not isinstance(length, bool) and path.exists() \
                    and path.stat().st_size > length:
                os.truncate(path, length)

    def sync_logs(self) -> None:
        """fsync each log that exists, so that a checkpoint's row (fsynced after it) never records more of a log than
        the disk holds."""
        for name in LOGS:
            try:
                fd = os.open(self.log_path(name), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def read_metrics(self) -> list[dict]:
        """The rows of ``metrics.jsonl`` that parse, in file order (a resumed run may repeat a step)."""
        return read_jsonl(self.metrics_path)

    @property
    def pool_path(self) -> Path:
        """``tasks/pool.json``: the run's training tasks in pool order, ``[[task_id, entry, label], ...]``."""
        return self.tasks_dir / "pool.json"

    def write_pool(self, rows: list[tuple[str, str | None, str | None]]) -> None:
        """Record the pool once at the start of the run (atomically), so per-task tables list every task."""
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.pool_path, {"format": 1, "tasks": rows})  # json writes a tuple as a list

    def read_pool(self) -> list[tuple[str, str | None, str | None]] | None:
        """The recorded pool, or None when the run recorded none (or it does not read)."""
        try:
            data = read_json_state(self.pool_path, formats={1})
        except ValueError:
            return None
        return [tuple(r) for r in data["tasks"]]

    def read_events(self) -> list[dict]:
        """The rows of ``tasks/events.jsonl`` that parse, in file order."""
        return read_jsonl(self.events_path)


def checkpoint_name(step: int) -> str:
    """A full checkpoint's name: the step, six digits (``000042``). Raises ValueError for a negative step."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"a checkpoint step is an int >= 0, not {step!r}")
    return f"{step:06d}"


def metrics_row(step: int, time: float, metrics: dict[str, object]) -> dict[str, object]:
    """One ``metrics.jsonl`` row: ``step`` and ``time`` first, then ``metrics`` in their order.

    Raises ValueError when ``metrics`` holds ``step`` or ``time``. Values must be JSON-safe: a NaN is refused by the
    writer, so a runtime logs ``None`` (or leaves the key out) for a value it has no data for.
    """
    clash = {"step", "time"} & set(metrics)
    if clash:
        raise ValueError(f"a metric may not be named {', '.join(sorted(clash))}")
    return {"step": step, "time": time, **metrics}


def as_run_dir(run_dir: RunDir | PathLike) -> RunDir:
    """``run_dir`` as a RunDir (a path is wrapped, a RunDir returned as is)."""
    return run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)


__all__ = ["LOCK_BASE_KEYS", "LOCK_LISTS", "LOGS", "NEEDED_LOGS", "NotARunDirectory", "RunDir", "as_run_dir", "checkpoint_name", "metrics_row"]
