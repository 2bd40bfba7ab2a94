"""Append-only JSON Lines logs: ``metrics.jsonl``, ``tasks/events.jsonl``, ``checkpoints.jsonl``.

Rules the writer keeps:

- one compact JSON object per line (``{"a":1}``), NaN and infinities refused (``allow_nan=False``), so a row is
  checked before anything is written and a bad row leaves the file as it was;
- each line is flushed as it is written, so a reader (or a crash) sees every whole line written so far;
- the file is opened in append mode; when its last byte is not a newline (a previous process died mid-line), a
  newline is written first, so the torn line stays one unparseable line instead of swallowing the next row.

Readers skip lines that do not parse as a JSON object (a torn last line, a torn line in the middle after a
restart) and read a missing file as empty. One writer per file at a time, from one thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Literal

from platoon.runs.atomic import PathLike, naming

log = logging.getLogger(__name__)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""``json.dumps`` with these arguments builds an encoder per call; a run writes a line for every group's events."""


def jsonl_line(row: Mapping[str, object]) -> bytes:
    """``row`` as one compact JSON line (UTF-8, ending in a newline).

    Raises TypeError when ``row`` is not a mapping or holds a value JSON cannot carry, ValueError on NaN or infinity.
    """
    if not isinstance(row, Mapping):
        raise TypeError(f"a JSONL row is a mapping (a JSON object), not {type(row).__name__}")
    text = _ENCODER.encode(dict(row))
    return (text + "\n").encode("utf-8")


class JsonlWriter:
    """Appends rows to a JSONL file, one flushed line each.

    ``on_error`` says what an OS error (a full disk, a vanished directory) does: ``"raise"`` (the default) raises it;
    ``"warn"`` logs one warning naming the file and stops the log for the rest of this writer's life (later writes
    do nothing; :attr:`stopped` says why). The event log uses ``"warn"``: a lost event must not end a run. Rows that
    are not JSON-safe raise in either mode: they are a bug of the caller, not of the disk.
    """

    def __init__(self, path: PathLike, *, on_error: Literal["raise", "warn"] = "raise") -> None:
        if on_error not in ("raise", "warn"):
            raise ValueError(f"on_error is 'raise' or 'warn', not {on_error!r}")
        self.path = Path(path)
        self.on_error = on_error
        self.stopped: str | None = None
        self._file: IO[bytes] | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")
            if self._ends_torn():
                self._file.write(b"\n")
                self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def _ends_torn(self) -> bool:
        assert self._file is not None
        if os.fstat(self._file.fileno()).st_size == 0:
            return False
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"

    def _fail(self, exc: OSError) -> None:
        if self.on_error == "raise":
            naming(exc, self.path)
            raise exc
        self.stopped = stop_writing(self._file, self.path, exc, "this log")
        self._file = None

    def write(self, row: Mapping[str, object]) -> None:
        """Append ``row`` as one line and flush it. Raises ValueError on a closed writer (not on a stopped one)."""
        line = jsonl_line(row)
        if self.stopped is not None:
            return
        if self._file is None:
            raise ValueError(f"write to a closed JsonlWriter ({self.path})")
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def sync(self) -> None:
        """fsync the file, for a row that is a commit point (a checkpoint's row)."""
        if self._file is None:
            return
        try:
            os.fsync(self._file.fileno())
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        """Close the file; idempotent. A close never raises for the disk: every row was flushed as it was written or
        its write failed (and said so), so what a failing close would flush again is a row already refused."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def stop_writing(file: IO[bytes] | None, path: Path, exc: OSError, what: str) -> str:
    """A log that cannot be written (``exc``) stops for this run start: one warning naming the file, the file closed
    (``file``, when open). Returns why, for the writer's ``stopped``."""
    log.warning("platoon: cannot write %s (%s); %s stops here for this run start", path, exc, what)
    if file is not None:
        try:
            file.close()
        except OSError:
            pass
    return f"{type(exc).__name__}: {exc}"


MAX_ROW_BYTES = 16 << 20
"""The longest line ``iter_jsonl`` parses (a row platoon writes is a few kilobytes): a longer one is garbage (a file
written over, a log of something else) and is skipped without being held, so reading any file takes bounded memory."""


def bounded_lines(f: IO[bytes], cap: int = MAX_ROW_BYTES) -> Iterator[tuple[bytes | None, int]]:
    """Each line of ``f`` and its length in bytes; a line longer than ``cap`` as None (read through in pieces)."""
    while raw := f.readline(cap + 1):
        size = len(raw)
        if size <= cap or raw.endswith(b"\n"):
            yield raw, size
            continue
        while raw and not raw.endswith(b"\n"):
            raw = f.readline(cap)
            size += len(raw)
        yield None, size


def iter_jsonl(path: PathLike, *, limit: int | None = None) -> Iterator[dict]:
    """Yield each line of ``path`` that parses as a JSON object, in file order, one at a time.

    Lines that do not parse, parse to something other than an object, or are longer than ``MAX_ROW_BYTES`` are
    skipped; a missing file yields nothing. ``limit``: only the lines within the file's first ``limit`` bytes (a
    checkpoint's recorded length).
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    seen = 0
    with f:
        for raw, size in bounded_lines(f):
            seen += size
            if limit is not None and seen > limit:
                return
            if raw is None:
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested too deeply to parse
                continue
            if isinstance(row, dict):
                yield row


def read_jsonl(path: PathLike) -> list[dict]:
    """Every row of ``path`` that parses (see :func:`iter_jsonl`), as a list."""
    return list(iter_jsonl(path))


__all__ = ["JsonlWriter", "MAX_ROW_BYTES", "bounded_lines", "iter_jsonl", "jsonl_line", "read_jsonl", "stop_writing"]
