"""Tables exported as files (``platoon tasks export``'s CSV, JSONL and Parquet), written atomically.

Rules it keeps: the output may lie outside any run directory, but it is written as a run's state is, through
:func:`platoon.runs.atomic.write_atomic`, so a reader (a notebook polling the file) never sees half an export and a
failed write leaves the old file whole. CSV has a header row and ``\\n`` line ends; JSONL is compact, one row a line.
Parquet is rendered from a frame given by the caller (anything with pandas' ``to_parquet``): this layer imports no
pandas (``platoon.runs``'s rule).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from platoon.runs.atomic import write_atomic


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """``rows`` as CSV with ``columns`` as its header, written to ``path`` atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue())


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` as compact JSON, one a line, written to ``path`` atomically."""
    write_atomic(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


def write_parquet(path: Path, frame: Any) -> None:
    """``frame`` (a pandas DataFrame) as Parquet, without its index, written to ``path`` atomically. Raises
    ImportError, before anything is written, when pandas has no Parquet engine (pyarrow)."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    write_atomic(path, buffer.getvalue())


__all__ = ["write_csv", "write_jsonl", "write_parquet"]
