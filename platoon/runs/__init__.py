"""The run directory: the only place that writes a run's artifacts (the simulator's and the live backend's alike).

- ``atomic``: durable atomic writes of state files and verified reads (``CorruptFileError``);
- ``jsonl``: append-only, per-line-flushed JSONL logs that survive a torn last line;
- ``rundir``: ``RunDir``, the layout and ``lock.json``;
- ``checkpoints``: full checkpoints, their index ``checkpoints.jsonl``, retention, and loading with fallback;
- ``writer``: the writer lock, one process writing a run at a time;
- ``resume``: what a resume checks before it changes anything (the run's runtime, its steps, its logs, its end);
- ``report_files``: a report's ``summary.md``, plots and a sweep's ``sweep.md``, each replaced whole;
- ``export``: ``platoon tasks export``'s CSV, JSONL and Parquet, written atomically wherever they go;
- ``shipped``: a run directory packed as bytes on one node and unpacked whole on another (a sweep's Ray points).

Every other module renders its text, table or figure and hands it here (``tests/test_writers.py`` checks it).

No pandas here: ``platoon.analysis`` turns these files into DataFrames (a Parquet export is given its frame).
"""

from platoon.runs.atomic import (
    CorruptFileError,
    read_json_state,
    sha256_file,
    write_atomic,
    write_json_atomic,
)
from platoon.runs.checkpoints import (
    CheckpointError,
    LoadedCheckpoint,
    kept_rows,
    load_checkpoint,
    load_latest_checkpoint,
    read_checkpoint_file,
    read_checkpoint_rows,
    save_checkpoint,
    stats_file_name,
)
from platoon.runs.jsonl import JsonlWriter, iter_jsonl, read_jsonl
from platoon.runs.rundir import RunDir, checkpoint_name, metrics_row
from platoon.runs.writer import RunBusyError, WriterLock

__all__ = [
    "CheckpointError",
    "CorruptFileError",
    "JsonlWriter",
    "LoadedCheckpoint",
    "RunBusyError",
    "RunDir",
    "WriterLock",
    "checkpoint_name",
    "iter_jsonl",
    "kept_rows",
    "load_checkpoint",
    "load_latest_checkpoint",
    "metrics_row",
    "read_checkpoint_file",
    "read_checkpoint_rows",
    "read_json_state",
    "read_jsonl",
    "save_checkpoint",
    "stats_file_name",
    "sha256_file",
    "write_atomic",
    "write_json_atomic",
]
