"""Durable, atomic writes of state files, and verified reads of JSON state.

Owns the one way a run's state reaches the disk: write ``.<name>.partial`` beside the target, fsync it, rename it
over the target, fsync the directory. A reader therefore sees either the old file or the new one, never a mix, and
after a crash the new file is either wholly there or not at all (a stray ``.partial`` is harmless and is
overwritten by the next write).

JSON state is compact (``separators=(",", ":")``), ends with a newline, and refuses NaN and infinities
(``allow_nan=False``), so every file parses in any JSON reader. A reader given the SHA-256 recorded at write time
verifies it; any problem is a :class:`CorruptFileError` naming the file and the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection
from pathlib import Path

PathLike = str | os.PathLike[str]


class CorruptFileError(ValueError):
    """A state file that cannot be used: missing, unreadable JSON, checksum mismatch or an unknown format.

    ``path`` is the file, ``reason`` the problem in words; ``str(error)`` is ``"<path>: <reason>"``.
    """

    def __init__(self, path: PathLike, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


def json_bytes(obj: object) -> bytes:
    """``obj`` as compact UTF-8 JSON with a trailing newline. Raises ValueError on NaN or infinity."""
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n").encode(
        "utf-8"
    )


def sha256_bytes(data: bytes) -> str:
    """The SHA-256 of ``data``, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: PathLike) -> str:
    """The SHA-256 of the file at ``path``, lowercase hex (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(path: PathLike) -> None:
    """fsync a directory so that a rename or a new entry in it survives a power loss.

    Platforms that cannot open a directory (Windows) skip it: their renames are as durable as they get.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def naming(exc: BaseException, path: PathLike) -> None:
    """An ``OSError`` whose system call named no file (a ``write`` that found the disk full) names ``path``."""
    if isinstance(exc, OSError) and exc.filename is None:
        exc.filename = str(path)


def write_atomic(path: PathLike, data: bytes | str, *, partial: PathLike | None = None) -> None:
    """Replace the file at ``path`` with ``data`` atomically and durably.

    Writes ``partial`` (default ``.<name>.partial``; a writer that may race another process names its own) in the
    same directory (creating the directory if needed), fsyncs it, renames it onto ``path`` and fsyncs the directory.
    ``str`` data is encoded as UTF-8. On any error the target is untouched and the partial file is removed; an
    ``OSError`` names ``path``.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(partial) if partial is not None else target.with_name(f".{target.name}.partial")
    try:
        with open(partial, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, target)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        naming(exc, target)
        raise
    fsync_dir(target.parent)


def write_json_atomic(path: PathLike, obj: object) -> str:
    """Write ``obj`` as compact JSON (see :func:`json_bytes`) with :func:`write_atomic`; return its SHA-256.

    Raises ValueError (and writes nothing) when ``obj`` holds NaN or infinity, TypeError when it is not JSON-safe.
    """
    payload = json_bytes(obj)
    write_atomic(path, payload)
    return sha256_bytes(payload)


def parse_json_state(
    path: PathLike, data: bytes, *, sha256: str | None = None, formats: Collection[int] | None = None
) -> object:
    """Check and parse the bytes ``data`` read from ``path`` (the path only names the file in errors).

    In order: the bytes must parse as JSON (else "truncated or unreadable JSON"); they must hash to ``sha256`` when
    it is given (else "checksum mismatch"); and when ``formats`` is given and the value is an object with a
    ``format`` field, that field must be one of ``formats`` (else "unknown format"). A file without a ``format``
    field passes the last check. Raises :class:`CorruptFileError`.
    """
    found = sha256_bytes(data)
    mismatch = sha256 is not None and found != sha256.lower()
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = "empty file" if not data else "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        extra = f"; checksum mismatch (expected {sha256}, found {found})" if mismatch else ""
        raise CorruptFileError(path, f"truncated or unreadable JSON ({why}){extra}") from None
    if mismatch:
        raise CorruptFileError(path, f"checksum mismatch (expected {sha256}, found {found})")
    if formats is not None and isinstance(obj, dict) and "format" in obj:
        fmt = obj["format"]
        known = sorted(formats)
        # bool is an int in Python; a format of true is a corrupt file, not format 1
        if isinstance(fmt, bool) or fmt not in known:
            raise CorruptFileError(
                path, f"unknown format {fmt!r} (this reader knows {', '.join(map(str, known))})"
            )
    return obj


def read_json_state(
    path: PathLike, *, sha256: str | None = None, formats: Collection[int] | None = None
) -> object:
    """Read a JSON state file written by :func:`write_json_atomic`, verified.

    Raises :class:`CorruptFileError` when the file is missing or unreadable, and for the checks of
    :func:`parse_json_state` (JSON, ``sha256`` when given, ``format`` among ``formats`` when given).
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CorruptFileError(path, "missing") from None
    except OSError as exc:
        raise CorruptFileError(path, f"unreadable ({exc.strerror or exc})") from None
    return parse_json_state(path, data, sha256=sha256, formats=formats)


__all__ = [
    "CorruptFileError",
    "fsync_dir",
    "json_bytes",
    "parse_json_state",
    "read_json_state",
    "sha256_bytes",
    "sha256_file",
    "write_atomic",
    "write_json_atomic",
]
