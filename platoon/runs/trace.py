"""``trace.json``: a run's timeline in the Chrome Trace Event format, written by both runtimes.

The file is the format's JSON-array form, one event per line: the first line starts with ``[``, every other line with
``,``, and no ``]`` is written, so the file is loadable at any moment (Perfetto and ``chrome://tracing`` take an
unterminated array; ``json.loads(text + "]")`` reads it too), also after a crash.

Rules the writer keeps (docs/run-directory.md, "trace.json"):

- events are complete spans (``"ph": "X"``, ``ts`` and ``dur`` in microseconds of the run's clock: simulated time in
  the simulator, seconds since the run began live) on named tracks (``tid``): ``trainer``, ``model service``, and
  rollout lanes (``rollout lane <n>``: a traced rollout takes the lowest free lane, so concurrent rollouts stack),
  and under ``rollout_isolation: ray`` a track per rollout actor (``actor-<k> on node <id>``: the rollouts it ran);
- lines are buffered and written in whole lines by :meth:`TraceWriter.flush` (the runtimes flush before each
  checkpoint records the log lengths, so a resume cuts the trace back to its checkpoint like the other logs); a
  SIGKILL leaves at most a torn last line, which the next writer cuts off when it opens the file;
- ``trace.group_every`` samples the rollouts: only the rollouts of every n-th drawn group (by draw position) get
  spans; the trainer's and the model service's spans are always written. ``trace.max_events`` caps the rollout spans
  of one run start: past it only the trainer's and the model service's spans are written (one ``trace truncated``
  instant event says where). An OS error warns once and stops the trace: a lost trace never ends a run.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from platoon.runs.atomic import PathLike
from platoon.runs.jsonl import bounded_lines, stop_writing

TRAINER = "trainer"
SERVICE = "model service"
LANE = "rollout lane"
PID = 1
_FLUSH_LINES = 4096
_FIXED_TRACKS = {TRAINER: 1, SERVICE: 2}
_FIRST_LANE_TID = 100
_FIRST_NAMED_TID = 1_000_000
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # one encoder: json.dumps with options
# builds a new one per call, most of a span's cost


def _us(seconds: float) -> int:
    return int(round(seconds * 1e6))


class TraceWriter:
    """Appends spans to ``trace.json`` (see the module docstring). One writer per file, from one thread.

    ``group_every``: the rollouts of a group whose draw position is a multiple of it are traced (:meth:`wants`);
    ``max_events``: the most rollout-lane events this writer writes (None: no cap); ``enabled``: False writes nothing.
    """

    def __init__(self, path: PathLike, *, group_every: int = 1, max_events: int | None = None,
                 enabled: bool = True) -> None:
        if group_every < 1:
            raise ValueError(f"group_every is at least 1, got {group_every}")
        self.path = Path(path)
        self.group_every = group_every
        self.max_events = max_events
        self.stopped: str | None = None if enabled else "disabled"
        self.lane_events = 0
        self.truncated = False
        self._lines: list[bytes] = []
        self._free: list[int] = []
        self._lanes = 0
        self._named: set[int] = set()
        self._empty = True
        self._file: IO[bytes] | None = None
        if enabled:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                mend(self.path)
                self._file = open(self.path, "ab")
                self._empty = os.fstat(self._file.fileno()).st_size == 0
            except OSError as exc:
                self._fail(exc)

    # --- what is traced -------------------------------------------------------------------------------------
    def wants(self, position: int) -> bool:
        """Whether the rollouts of the group drawn at ``position`` get spans."""
        return self.stopped is None and position % self.group_every == 0 and not self.truncated

    def open_lane(self) -> int:
        """A rollout lane for one traced rollout: the lowest free one (``close_lane`` gives it back)."""
        if self._free:
            self._free.sort()
            return self._free.pop(0)
        self._lanes += 1
        return self._lanes - 1

    def close_lane(self, lane: int) -> None:
        self._free.append(lane)

    # --- resuming -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What a resume needs to go on writing as this writer would: the lanes in use and the tracks already named
        (so a replay from a checkpoint writes the same lines, no second ``thread_name``). The cap's count is not in
        it: ``max_events`` counts one run start's spans."""
        return {"lanes": self._lanes, "free": sorted(self._free), "named": sorted(self._named)}

    def load_state_dict(self, state: dict) -> None:
        """Go on from ``state_dict``'s (a checkpoint's, whose length the trace was cut back to). A trace found empty
        (lost) names its tracks again."""
        self._lanes, self._free = int(state["lanes"]), list(state["free"])
        self._named = set() if self._empty else set(state["named"])

    # --- writing --------------------------------------------------------------------------------------------
    def span(self, name: str, track: str | int, start_s: float, end_s: float, **args: Any) -> None:
        """One complete span ``[start_s, end_s]`` (seconds of the run's clock) on ``track``: ``TRAINER``,
        ``SERVICE``, a rollout lane number, or the name of a track of its own (a Ray actor's, which serves one
        rollout at a time). ``args`` are shown with it (and read by ``platoon calibrate``)."""
        if self.stopped is not None:
            return
        tid = self._tid(track, start_s)
        if tid is None:
            return
        event: dict[str, Any] = {"name": name, "ph": "X", "ts": _us(start_s), "dur": max(0, _us(end_s - start_s)),
                                 "pid": PID, "tid": tid}
        if args:
            event["args"] = args
        self._add(event)

    def _tid(self, track: str | int, now_s: float) -> int | None:
        if isinstance(track, str) and track in _FIXED_TRACKS:
            tid = _FIXED_TRACKS[track]
            self._name(tid, track)
            return tid
        if self.max_events is not None and self.lane_events >= self.max_events:
            if not self.truncated:
                self.truncated = True
                self._add({"name": "trace truncated", "ph": "i", "s": "g", "ts": _us(now_s), "pid": PID, "tid": 1,
                           "args": {"rollout_events": self.lane_events, "max_events": self.max_events}})
            return None
        self.lane_events += 1
        if isinstance(track, str):  # a named track of its own (a Ray actor's): its tid from its name, stable on resume
            tid = _FIRST_NAMED_TID + zlib.crc32(track.encode()) % 1_000_000
            self._name(tid, track)
            return tid
        tid = _FIRST_LANE_TID + track
        self._name(tid, f"{LANE} {track}")
        return tid

    def _name(self, tid: int, name: str) -> None:
        if tid not in self._named:
            self._named.add(tid)
            self._add({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})

    def _add(self, event: dict[str, Any]) -> None:
        text = _ENCODE(event)
        self._lines.append((b"[" if self._empty else b",") + text.encode() + b"\n")
        self._empty = False
        if len(self._lines) >= _FLUSH_LINES:
            self.flush()

    def flush(self) -> None:
        """Write the buffered lines (whole lines, flushed to the OS)."""
        if self._file is None or not self._lines:
            self._lines.clear()
            return
        try:
            self._file.write(b"".join(self._lines))
            self._file.flush()
        except OSError as exc:
            self._fail(exc)
        self._lines.clear()

    def close(self) -> None:
        """Flush and close; idempotent."""
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _fail(self, exc: OSError) -> None:
        self.stopped = stop_writing(self._file, self.path, exc, "the trace")
        self._file = None


_STATUS = {"completed": "ok", "error": "failed"}


def rollout_status(disposition: str) -> str:
    """A member's disposition (``platoon.policy.stats.MemberResult``) as its ``rollout`` span's status: ``ok``,
    ``failed`` (it raised) or ``cancelled`` (any other: cut, cancelled, lost)."""
    return _STATUS.get(disposition, "cancelled")


def mend(path: PathLike) -> None:
    """Cut a torn last line (a process killed mid-write) off the trace at ``path``, if it has one."""
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            keep = 0
            block = 65536
            pos = size
            while pos > 0:  # find the last newline, reading backwards
                start = max(0, pos - block)
                f.seek(start)
                chunk = f.read(pos - start)
                at = chunk.rfind(b"\n")
                if at >= 0:
                    keep = start + at + 1
                    break
                pos = start
            f.truncate(keep)
    except FileNotFoundError:
        return


def iter_trace(path: PathLike) -> Iterator[dict]:
    """Each event of the trace at ``path`` that parses, in file order (a torn line, or one longer than
    ``MAX_ROW_BYTES``, is skipped; a missing file yields nothing)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for raw, _ in bounded_lines(f):
            if raw is None:
                continue
            text = raw.strip()
            if text[:1] in (b"[", b","):
                text = text[1:]
            try:
                event = json.loads(text)
            except (UnicodeDecodeError, ValueError, RecursionError):
                continue
            if isinstance(event, dict):
                yield event


def read_trace(path: PathLike) -> list[dict]:
    """Every event of the trace at ``path`` (see :func:`iter_trace`)."""
    return list(iter_trace(path))


def closed_trace(path: PathLike) -> bytes:
    """The trace at ``path`` as one valid JSON array (what ``platoon trace`` writes): its events that parse, one a
    line, and the ``]`` the live file leaves off; a torn last line is left out."""
    lines = [_ENCODE(event) for event in iter_trace(path)]
    return ("[" + "\n,".join(lines) + "]\n").encode()


def track_names(events: list[dict]) -> dict[int, str]:
    """``tid -> name`` from the trace's ``thread_name`` metadata events."""
    return {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}


__all__ = ["LANE", "SERVICE", "TRAINER", "TraceWriter", "closed_trace", "iter_trace", "mend", "read_trace", "rollout_status",
           "track_names"]
