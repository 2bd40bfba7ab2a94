"""Full checkpoints: ``checkpoints/<step:06d>/`` and their index, ``checkpoints.jsonl``.

A full checkpoint is a directory of named files: JSON objects (``tasks/dispatch-<step>.json``, the dispatcher state
in format 2; ``tasks/state-<step>.json``, the statistics snapshot of old) and raw bytes (``trainer.pt``, written by
the live backend). A name ending in ``.json`` holds JSON, one ending in ``.npz`` an object with numpy ``columns``
(``platoon.runs.columnar``: ``tasks/state-<step>.npz``, the statistics snapshot in format 2); any other name holds
bytes.

Guarantees:

- **The row is the commit point.** Every file is written and fsynced into ``checkpoints/.<name>.partial/``, the
  directory is swapped into place, the run's logs are fsynced (a row records their lengths), and only then is the
  row ``{"step", "name", "path", "files": {name: sha256}, "time", **row}`` appended to ``checkpoints.jsonl`` and
  fsynced. A crash before the row leaves the previous
  checkpoints as they were; a reader never takes a directory that has no row.
- **A re-save replaces the whole directory.** Saving a step again (a resume re-saves its step) swaps a fresh
  directory in: atomically on Linux (``renameat2(RENAME_EXCHANGE)``); elsewhere by two renames, where a crash
  between them leaves the step's directory absent, which readers treat as a broken checkpoint and pass over.
- **A broken newest checkpoint falls back.** :func:`load_latest_checkpoint` takes the newest row (the last in the
  file) whose every file exists, has the recorded SHA-256, parses (``.json``) and has a ``format`` this reader
  knows; each newer row it passes over gets a note naming the file and the problem. Files the caller names
  ``optional`` do not count: one that does not read is left out, with its problem in ``LoadedCheckpoint.broken``, so
  the caller can make up for that part alone (a live resume takes the statistics from an older checkpoint).
- **Retention keeps the newest.** With ``keep=N`` a save removes the directories of all but the N newest checkpoints
  (by step, the new one included) once its own row is committed; the row lists them under ``pruned``, so readers
  skip their rows without a note. A crash before the removal leaves them on disk, and a later save removes them.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import os
import shutil
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from platoon.runs.atomic import (
    CorruptFileError,
    fsync_dir,
    json_bytes,
    naming,
    parse_json_state,
    sha256_bytes,
)
from platoon.runs.columnar import npz_bytes, parse_npz
from platoon.runs.jsonl import JsonlWriter, jsonl_line, read_jsonl
from platoon.runs.rundir import PathLike, RunDir, as_run_dir, checkpoint_name

#: The ``format`` values a reader accepts, by file name pattern (fnmatch). A JSON file that matches no pattern,
#: or has no ``format`` field, passes the format check.
DEFAULT_FORMATS: Mapping[str, frozenset[int]] = {"tasks/dispatch-*.json": frozenset({1, 2})}

#: Keys of a checkpoints.jsonl row that save_checkpoint sets itself.
ROW_BASE_KEYS = ("step", "name", "path", "files", "time", "permanent", "pruned")


class CheckpointError(ValueError):
    """No usable checkpoint. ``path`` is the file at fault (the newest bad file, or ``checkpoints.jsonl`` when
    there is no row); ``problems`` holds one note per checkpoint that was tried, newest first."""

    def __init__(self, message: str, *, path: Path, problems: list[str] | None = None) -> None:
        self.path = path
        self.problems = list(problems or [])
        super().__init__(message)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint that read back whole.

    ``row`` is its ``checkpoints.jsonl`` row; ``files`` maps each name to its parsed JSON (``.json``), its
    columnar object (``.npz``) or its bytes;
    ``passed_over`` holds one note per newer row that did not read (newest first; empty from load_checkpoint);
    ``path`` is its directory.
    """

    row: dict
    files: dict[str, object]
    passed_over: list[str]
    path: Path
    #: Optional files (see load_latest_checkpoint) that did not read back: name -> the problem.
    broken: dict[str, str] = field(default_factory=dict)

    @property
    def step(self) -> int:
        return self.row["step"]

    @property
    def name(self) -> str:
        return self.row["name"]


def _file_name(name: object) -> PurePosixPath:
    """Check that ``name`` is a relative POSIX path inside the checkpoint directory."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a checkpoint file name is a non-empty str, not {name!r}")
    path = PurePosixPath(name)
    if path.is_absolute() or "\\" in name or any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(f"checkpoint file name {name!r} is not a plain relative path (a/b.json)")
    return path


def _encode(name: str, value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        if name.endswith(".json"):
            # a .json file is read back as JSON: refuse bytes that would make the checkpoint unreadable
            parse_json_state(name, data)
        return data
    if name.endswith(".npz"):
        return npz_bytes(name, value)
    if not name.endswith(".json"):
        raise ValueError(
            f"checkpoint file {name!r}: only a .json or .npz file takes an object; pass bytes for other files"
        )
    return json_bytes(value)


def _write_synced(path: Path, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        naming(exc, path)
        raise


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if sys.platform != "linux":
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _replace_dir(src: Path, dst: Path) -> None:
    """Put the directory ``src`` at ``dst``, replacing what is there (see the module's guarantees)."""
    if not dst.exists():
        os.rename(src, dst)
        return
    if _exchange(src, dst):
        shutil.rmtree(src)  # src now holds the old directory
        return
    old = dst.with_name(f".{dst.name}.replaced")
    if old.exists():
        shutil.rmtree(old)
    os.rename(dst, old)
    os.rename(src, dst)
    shutil.rmtree(old)


def _with_sha256(value: object, hashes: Mapping[str, str]) -> object:
    """A row record that names one of the checkpoint's files (``{"file": ...}``) gets that file's sha256."""
    if isinstance(value, Mapping) and value.get("file") in hashes and "sha256" not in value:
        return {**value, "sha256": hashes[value["file"]]}
    return value


def save_checkpoint(
    run_dir: RunDir | PathLike, step: int, files: Mapping[str, object], row: Mapping[str, object], *,
    keep: int | None = None, permanent: bool = False,
) -> dict:
    """Write the full checkpoint of ``step`` and append its row to ``checkpoints.jsonl``; return the row.

    ``files`` maps a relative name (``tasks/dispatch-000010.json``, ``trainer.pt``) to a JSON-safe object (names
    ending in ``.json``), an object with numpy ``columns`` (names ending in ``.npz``) or bytes (any name; under ``.json`` they must parse as JSON). ``row`` adds keys to the row
    (``policy_version``, ``next_position``, ...) and may not reuse :data:`ROW_BASE_KEYS`; a record in it that names
    one of ``files`` (``{"file": name, ...}``) gets that file's ``sha256``. Every file, and the row,
    is checked before anything is written: a bad name or value raises ValueError/TypeError and leaves the run
    directory as it was. A step saved again gets a fresh directory and a new row (see the module's guarantees).
    ``permanent`` checkpoints (``checkpoint.every``, the launch and the final one) are kept for good; ``keep`` (at
    least 1; None: every one) is how many of the others, the recovery checkpoints, to keep: the newest by step, and
    this one in any case; the directories of the others are removed after the row is committed, which names them
    under ``pruned``. The row records ``permanent``.
    """
    rd = as_run_dir(run_dir)
    name = checkpoint_name(step)
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ValueError(f"keep is an int >= 1 or None, not {keep!r}")
    clash = sorted(set(row) & set(ROW_BASE_KEYS))
    if clash:
        raise ValueError(f"checkpoint row keys clash with its own: {', '.join(clash)}")
    payloads = {str(_file_name(n)): _encode(n, value) for n, value in files.items()}
    hashes = {n: sha256_bytes(data) for n, data in payloads.items()}
    out = {
        "step": step,
        "name": name,
        "path": f"checkpoints/{name}",
        "files": hashes,
        "time": time.time(),
        "permanent": bool(permanent),
        **{k: _with_sha256(v, hashes) for k, v in row.items()},
    }
    pruned = _to_prune(rd, step, keep, permanent) if keep is not None else []
    if pruned:
        out["pruned"] = pruned
    jsonl_line(out)  # refuse a row that is not JSON-safe before any file is written

    rd.checkpoints_dir.mkdir(parents=True, exist_ok=True)
    partial = rd.checkpoints_dir / f".{name}.partial"
    if partial.exists():
        shutil.rmtree(partial)  # left by a save that died
    partial.mkdir()
    try:
        dirs = {partial}
        for n, data in payloads.items():
            target = partial / n
            target.parent.mkdir(parents=True, exist_ok=True)
            dirs.update(p for p in target.parents if p.is_relative_to(partial))
            _write_synced(target, data)
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(d)
        _replace_dir(partial, rd.checkpoint_dir(step))
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    fsync_dir(rd.checkpoints_dir)
    rd.sync_logs()  # the row may record the logs' lengths: what it records must be on disk before it
    with JsonlWriter(rd.checkpoints_path) as writer:
        writer.write(out)
        writer.sync()
    for old in pruned:
        shutil.rmtree(rd.checkpoints_dir / old, ignore_errors=True)
    if pruned:
        fsync_dir(rd.checkpoints_dir)
    return out


def _to_prune(rd: RunDir, step: int, keep: int, permanent: bool) -> list[str]:
    """The recovery checkpoint directories beyond the ``keep`` newest (``step`` among them unless ``permanent``),
    oldest first; a permanent checkpoint is never pruned (a step saved again takes its newest row's kind), nor the
    one being saved (an older step saved again, a resume's launch save past a newer checkpoint that did not read)."""
    kinds = {}
    for row in read_checkpoint_rows(rd):
        s = row.get("step")
        if isinstance(s, int) and not isinstance(s, bool) and s >= 0:
            kinds[s] = row.get("permanent") is True
    kinds[step] = permanent
    recovery = sorted((s for s, kept_for_good in kinds.items() if not kept_for_good), reverse=True)
    return [checkpoint_name(s) for s in sorted(recovery[keep:]) if s != step and rd.checkpoint_dir(s).is_dir()]


def stats_file_name(row: Mapping[str, object], name: str) -> str:
    """The statistics snapshot's file of checkpoint ``name`` (its ``row``): ``tasks/state-<name>.npz`` where the row
    lists one (this release writes it), else ``tasks/state-<name>.json`` (the JSON form of older releases)."""
    files = row.get("files")
    npz = f"tasks/state-{name}.npz"
    return npz if isinstance(files, Mapping) and npz in files else f"tasks/state-{name}.json"


def read_checkpoint_rows(run_dir: RunDir | PathLike) -> list[dict]:
    """The rows of ``checkpoints.jsonl`` that parse, oldest first (a re-saved step has several)."""
    return read_jsonl(as_run_dir(run_dir).checkpoints_path)


def _formats_for(name: str, formats: Mapping[str, Collection[int]]) -> Collection[int] | None:
    for pattern, known in formats.items():
        if fnmatch.fnmatchcase(name, pattern):
            return known
    return None


def _read_row(
    rd: RunDir, row: dict, formats: Mapping[str, Collection[int]], optional: Collection[str] = (),
    broken: dict[str, str] | None = None,
) -> tuple[Path, dict[str, object]]:
    """Read and verify every file of ``row``. Raises CheckpointError naming the first file at fault; a file
    matching an ``optional`` pattern that does not read is left out and noted in ``broken``."""
    broken = {} if broken is None else broken
    rel, names = row.get("path"), row.get("files")
    label = f"checkpoint {row.get('name', '?')}"
    if (
        not isinstance(rel, str)
        or not isinstance(names, dict)
        or not all(isinstance(s, str) for s in names.values())
    ):
        raise CheckpointError(
            f"{label}: its row in checkpoints.jsonl has no valid path and files", path=rd.checkpoints_path
        )
    try:
        _file_name(rel)
    except ValueError:
        raise CheckpointError(
            f"{label}: its row's path {rel!r} leaves the run directory", path=rd.checkpoints_path
        ) from None
    directory = rd.path / rel
    loaded: dict[str, object] = {}
    for name, sha in names.items():
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in optional):
            try:
                loaded[name] = _read_file(rd, rel, name, sha, formats)
            except CheckpointError as exc:
                broken[name] = str(exc)
            continue
        loaded[name] = _read_file(rd, rel, name, sha, formats)
    return directory, loaded


def read_checkpoint_bytes(path: Path, shown: str) -> bytes:
    """The bytes of a checkpoint's file at ``path``; CheckpointError naming it (as ``shown``) when it is missing or
    cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{shown}: missing", path=path) from None
    except OSError as exc:
        raise CheckpointError(f"{shown}: unreadable ({exc.strerror or exc})", path=path) from None


def _read_file(rd: RunDir, rel: str, name: str, sha: str, formats: Mapping[str, Collection[int]]) -> object:
    """One file of a checkpoint, verified: parsed JSON or bytes. Raises CheckpointError naming it."""
    shown = f"{rel}/{name}"
    try:
        target = rd.path / rel / _file_name(name)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {rel}: {exc}", path=rd.checkpoints_path) from None
    data = read_checkpoint_bytes(target, shown)
    if name.endswith(".json"):
        try:
            return parse_json_state(shown, data, sha256=sha, formats=_formats_for(name, formats))
        except CorruptFileError as exc:
            raise CheckpointError(str(exc), path=target) from None
    found = sha256_bytes(data)
    if found != sha.lower():
        raise CheckpointError(f"{shown}: checksum mismatch (expected {sha}, found {found})", path=target)
    if name.endswith(".npz"):
        try:
            return parse_npz(shown, data)
        except CorruptFileError as exc:
            raise CheckpointError(str(exc), path=target) from None
    return data


def read_checkpoint_file(
    run_dir: RunDir | PathLike, row: Mapping[str, object], name: str, *,
    formats: Mapping[str, Collection[int]] | None = None,
) -> object:
    """The file ``name`` of the checkpoint ``row`` alone, verified (parsed JSON or bytes). Raises CheckpointError
    when the row does not list it or it does not read back."""
    rd = as_run_dir(run_dir)
    rel, names = row.get("path"), row.get("files")
    if not isinstance(rel, str) or not isinstance(names, dict) or not isinstance(names.get(name), str):
        raise CheckpointError(f"checkpoint {row.get('name', '?')} has no file {name}", path=rd.checkpoints_path)
    try:
        _file_name(rel)
    except ValueError:
        raise CheckpointError(f"checkpoint {row.get('name', '?')}: its row's path {rel!r} leaves the run directory",
                              path=rd.checkpoints_path) from None
    return _read_file(rd, rel, name, names[name], DEFAULT_FORMATS if formats is None else formats)


def kept_rows(run_dir: RunDir | PathLike) -> list[dict]:
    """The rows of ``checkpoints.jsonl`` newest first, less those a newer row ``pruned`` (their directories are
    gone by design)."""
    pruned: set[str] = set()
    out = []
    for row in reversed(read_checkpoint_rows(run_dir)):
        if row.get("name") not in pruned:
            out.append(row)
        names = row.get("pruned")
        if isinstance(names, list):
            pruned.update(n for n in names if isinstance(n, str))
    return out


MAX_RELISTS = 5
"""How many times ``load_latest_checkpoint`` lists the checkpoints again when a running trainer pruned the one it read."""


def load_latest_checkpoint(
    run_dir: RunDir | PathLike, *, formats: Mapping[str, Collection[int]] | None = None,
    optional: Collection[str] = (),
) -> LoadedCheckpoint:
    """The newest checkpoint whose files all verify, with a note for each newer one passed over.

    ``formats`` maps file name patterns to the ``format`` values this reader knows (default
    :data:`DEFAULT_FORMATS`: dispatch files 1 and 2). ``optional`` holds file name patterns (fnmatch) whose failure
    does not pass a checkpoint over: such a file is left out of ``files`` and its problem is in ``broken``. Rows are
    tried from the last in ``checkpoints.jsonl`` backwards, skipping those a newer row pruned; when one fails to read
    and a newer row has appeared meanwhile (a trainer writing the run saved and pruned), from the new listing again
    (at most ``MAX_RELISTS`` times). Raises
    CheckpointError when there is no row, or when none reads (naming the newest bad file; every note is in
    ``problems``).
    """
    rd = as_run_dir(run_dir)
    formats = DEFAULT_FORMATS if formats is None else formats
    rows = kept_rows(rd)
    if not rows:
        raise CheckpointError(
            f"{rd.path}: no checkpoint (checkpoints.jsonl has no row)", path=rd.checkpoints_path
        )
    notes: list[str] = []
    newest_bad: CheckpointError | None = None
    relisted = 0
    while True:
        for row in rows:
            broken: dict[str, str] = {}
            try:
                directory, files = _read_row(rd, row, formats, optional, broken)
            except CheckpointError as exc:
                # a trainer writing the run saved a newer checkpoint and pruned this one while it was read: go on
                # from the new listing, not from an older checkpoint than the run has
                if relisted < MAX_RELISTS and (fresh := kept_rows(rd)) and fresh[0] != rows[0]:
                    rows, relisted = fresh, relisted + 1
                    break
                newest_bad = newest_bad or exc
                notes.append(
                    f"passed over checkpoint {row.get('name', '?')} (step {row.get('step', '?')}): {exc}"
                )
                continue
            return LoadedCheckpoint(row=row, files=files, path=directory, passed_over=notes, broken=broken)
        else:
            break
    assert newest_bad is not None
    raise CheckpointError(
        f"{rd.path}: no checkpoint reads back; the newest: {newest_bad}", path=newest_bad.path, problems=notes
    )


def load_checkpoint(
    run_dir: RunDir | PathLike, step: int, *, formats: Mapping[str, Collection[int]] | None = None
) -> LoadedCheckpoint:
    """The checkpoint of ``step`` (its newest row), strictly: any problem raises CheckpointError naming the file."""
    rd = as_run_dir(run_dir)
    formats = DEFAULT_FORMATS if formats is None else formats
    name = checkpoint_name(step)
    for row in reversed(read_checkpoint_rows(rd)):
        if row.get("step") == step and not isinstance(row.get("step"), bool):
            directory, files = _read_row(rd, row, formats)
            return LoadedCheckpoint(row=row, files=files, passed_over=[], path=directory)
    raise CheckpointError(f"{rd.path}: no checkpoint {name} in checkpoints.jsonl", path=rd.checkpoints_path)


__all__ = [
    "DEFAULT_FORMATS",
    "ROW_BASE_KEYS",
    "CheckpointError",
    "LoadedCheckpoint",
    "load_checkpoint",
    "stats_file_name",
    "kept_rows",
    "load_latest_checkpoint",
    "read_checkpoint_bytes",
    "read_checkpoint_file",
    "read_checkpoint_rows",
    "save_checkpoint",
]
