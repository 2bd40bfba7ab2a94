"""A run directory shipped as bytes between nodes (a sweep's point run as a Ray task): packed whole where it ran,
unpacked whole where the sweep's directory is.

Rules it keeps: ``unpack`` writes the tree as a run's state is written: extracted beside the target as
``.<name>.partial``, every file fsynced, then renamed onto the target and the parent directory fsynced, so a reader
of the sweep's directory finds a point whole or not at all (a stray ``.partial`` left by a crash is removed by the
next unpack of that point). The target must not exist, as a new run's directory must not.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import tarfile
from pathlib import Path

from platoon.runs.atomic import fsync_dir


def pack(path: Path) -> bytes:
    """The directory ``path``'s tree as a gzipped tar, its members named relative to it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        tar.add(path, arcname=".")
    return buffer.getvalue()


def unpack(data: bytes, path: Path) -> None:
    """Write ``pack``'s tree as the new directory ``path``, whole (the module's rules); FileExistsError when
    ``path`` exists."""
    if path.exists():
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
    partial = path.with_name(f".{path.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            # the data filter (Python 3.11.4 on) refuses links and names outside the target; the tar is our own
            tar.extractall(partial, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        _fsync_tree(partial)
        os.rename(partial, path)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    fsync_dir(path.parent)


def _fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every directory, deepest first (their entries are then durable)."""
    dirs = [root]
    for p in root.rglob("*"):
        if p.is_dir():
            dirs.append(p)
        elif p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        fsync_dir(d)


__all__ = ["pack", "unpack"]
