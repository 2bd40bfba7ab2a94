"""Columnar checkpoint files (``.npz``): an object whose ``columns`` are numpy arrays, the rest JSON.

A checkpoint file named ``*.npz`` holds such an object (``platoon.policy``'s statistics snapshot in format 2):
``columns`` maps names to numpy arrays, every other key is JSON data. The file is a zip of ``.npy`` arrays that
``numpy.load`` reads (no pickles: numbers and strings only): ``meta`` (the JSON of the other keys, as bytes) and
``c.<name>`` per column. Writing is deterministic, the same object giving the same bytes (fixed zip timestamps), so
that a resumed run's checkpoints hash as an uninterrupted run's do. A file that does not read is a
``CorruptFileError`` naming it.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from platoon.runs.atomic import CorruptFileError, PathLike, json_bytes

_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: no wall clock in the bytes


def npz_bytes(name: str, value: object) -> bytes:
    """The bytes of the columnar file ``name`` holding ``value`` (a mapping with a ``columns`` mapping)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("columns"), Mapping):
        raise ValueError(f"checkpoint file {name!r}: a .npz file takes an object with a 'columns' mapping")
    meta = {k: v for k, v in value.items() if k != "columns"}
    arrays = {"meta": np.frombuffer(json_bytes(meta), dtype=np.uint8)}
    arrays.update({f"c.{k}": np.ascontiguousarray(a) for k, a in value["columns"].items()})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        for key, array in arrays.items():
            if array.dtype.hasobject:
                raise ValueError(f"checkpoint file {name!r}: column {key!r} holds Python objects")
            with z.open(zipfile.ZipInfo(f"{key}.npy", date_time=_EPOCH), "w", force_zip64=True) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)
    return buf.getvalue()


def parse_npz(path: PathLike, data: bytes) -> dict[str, Any]:
    """The object ``npz_bytes`` wrote, read back from ``data`` (``path`` names the file in errors)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {key: z[key] for key in z.files}
        meta = json.loads(arrays.pop("meta").tobytes().decode("utf-8"))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"unreadable columnar file ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or any(not key.startswith("c.") for key in arrays):
        raise CorruptFileError(path, "unreadable columnar file (not a platoon columnar object)")
    return {**meta, "columns": {key[2:]: a for key, a in arrays.items()}}


__all__ = ["npz_bytes", "parse_npz"]
