"""The writer lock: one process at a time writes a run directory (``RUN/writer.lock``, docs/run-directory.md).

Every command that writes a run (a new run, a resume, a sweep's directory) takes the lock before it changes anything
and holds it until it ends; a second writer is refused with ``RunBusyError``, naming the holder.

How it works and what it keeps:

- The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``RUN/writer.lock``, held on an open file for the writer's whole life.
  The kernel drops it when the holder's file is closed or the holder dies, however it dies (``SIGKILL`` included), so
  a dead writer never leaves a lock that blocks: the next writer simply gets it. ``flock`` locks belong to the open
  file, so two writers in one process exclude each other too.
- The holder writes who it is into the file (``{"pid", "host", "command", "since"}``) once it holds the lock, for the
  refusal's message; on release it empties the file. A record found in a file whose lock is free is a writer that
  ended without releasing (killed, or its host went down): it is overwritten, and ``WriterLock.previous`` keeps it so
  the caller can say so.
- Another host: on a network file system the lock is as good as the file system's. Linux's NFS client turns
  ``flock`` into a whole-file lock that the server keeps, so a writer on another host is seen, and a host that dies
  loses its locks when its lease runs out (NFSv4: 90 s by default). A file system without shared locks (some FUSE
  mounts) does not see other hosts' writers; the record still names the host that wrote it.
- The file is never deleted: deleting a lock file while another process has it open lets two writers lock two
  different files.
- A forked child closes its copies of the held locks' files at once (``os.register_at_fork``): a ``flock`` lock
  belongs to the open file, which a child shares, so a child that outlived a killed writer would otherwise keep
  the run locked.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import weakref
from datetime import UTC, datetime
from pathlib import Path

from platoon.runs.atomic import PathLike

WRITER_FILE = "writer.lock"


class RunBusyError(RuntimeError):
    """Another process writes the run directory (exit 64). ``holder`` is its record, or None when it wrote none yet."""

    def __init__(self, path: Path, holder: dict | None) -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"{path.parent}: another process is writing this run ({describe(holder)}); wait for it to "
                         "end, or use another run directory")


def describe(holder: dict | None) -> str:
    """A holder's record in words: ``pid 4242 on host gpu-3, 'platoon train --resume runs/a', since ...``."""
    if not holder:
        return "it has not said which yet"
    parts = [f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"]
    if holder.get("command"):
        parts.append(repr(holder["command"]))
    if holder.get("since"):
        parts.append(f"since {holder['since']}")
    return ", ".join(parts)


def _read_record(fd: int) -> dict | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
        record = json.loads(data.decode("utf-8")) if data.strip() else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _command() -> str:
    argv = [os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]]
    text = " ".join(argv)
    return text if len(text) <= 200 else text[:197] + "..."


class WriterLock:
    """The held writer lock of one run directory; ``acquire`` takes it, ``release`` (or ``with``) gives it back."""

    def __init__(self, path: Path, fd: int, previous: dict | None) -> None:
        self.path = path
        self._fd: int | None = fd
        #: The record of a writer that ended without releasing the lock (killed, or its host down), or None.
        self.previous = previous

    @classmethod
    def acquire(cls, run_path: PathLike, *, command: str | None = None) -> WriterLock:
        """Take ``run_path``'s writer lock (the directory must exist). Raises RunBusyError when another process
        holds it."""
        path = Path(run_path) / WRITER_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_record(fd)
            os.close(fd)
            raise RunBusyError(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            previous = _read_record(fd)
            record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command or _command(),
                      "since": datetime.now(UTC).isoformat(timespec="seconds")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        except BaseException:
            os.close(fd)  # closing drops the lock
            raise
        lock = cls(path, fd, previous)
        _HELD.add(lock)
        global _LAST_RUN
        _LAST_RUN = path.parent
        return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Empty the record and drop the lock; idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass  # the record is only a message; the lock goes with the file
        finally:
            os.close(fd)

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __del__(self) -> None:  # a writer dropped without release: the lock goes with its file
        if getattr(self, "_fd", None) is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass


_HELD: weakref.WeakSet[WriterLock] = weakref.WeakSet()
_LAST_RUN: Path | None = None


def forget_last_run() -> None:
    """Start a new command: ``last_written_run`` is None until it takes a writer lock."""
    global _LAST_RUN
    _LAST_RUN = None


def last_written_run() -> Path | None:
    """The run directory whose writer lock this process took last (held or given back), or None: where an
    interrupted command says what it saved."""
    return _LAST_RUN


def _forget_in_child() -> None:
    """In a forked child: close the copies of the held locks' files (the parent keeps its locks)."""
    for lock in list(_HELD):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def stale_note(lock: WriterLock) -> str | None:
    """A line for a lock taken over from a writer that ended without releasing it, or None."""
    if not lock.previous:
        return None
    return (f"{lock.path.parent}: the last writer ({describe(lock.previous)}) ended without releasing its lock "
            "(killed?); this process writes the run now")


__all__ = ["WRITER_FILE", "RunBusyError", "WriterLock", "describe", "forget_last_run", "last_written_run", "stale_note"]
