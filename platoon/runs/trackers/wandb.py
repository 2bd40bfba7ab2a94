"""Weights & Biases: the run's files under ``RUN/wandb`` (0.4.0's ``stats.wandb`` keys set it up).

The W&B run id is kept in ``RUN/trackers.json`` (or is ``resume_run_id``), and each start opens it with
``resume="allow"``, so a resumed platoon run continues its W&B run. W&B's own process writes the run's records to
its transaction log (``RUN/wandb/offline-run-*/run-<id>.wandb``) every few seconds, so a kill loses the last ones:
an offline run's start counts the rows those files hold (``held_rows``: their history records, a row each) and is
sent the others again. W&B 0.31 reads these files in its Go core only; ``records`` walks their framing (a 7-byte
``:W&B`` header, then LevelDB's log format: 32 KiB blocks of records, each a CRC-32C, a length and a type before its
bytes) and decodes each with W&B's own protocol buffers; a file it cannot read leaves the count kept in
``RUN/trackers.json``. Online, W&B's server holds the history: the count kept is used, and a row sent again is
one W&B's server already has at that step. ``mode: online`` logs to the server only where
credentials are found (``api_key``, ``WANDB_API_KEY``, or ``wandb login``'s ``.netrc`` entry for the server);
otherwise the run is written offline and the start says so, with the command that uploads it (``wandb sync``).
W&B's own console capture and system sampling are off: the run's metrics are platoon's rows, nothing else.
"""

from __future__ import annotations

import netrc
import os
import secrets
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["WandbTracker", "has_credentials", "held_rows", "records"]

SERVER = "https://api.wandb.ai"
BLOCK = 32768
HEADER = 7  # the file's header, and each record's (checksum 4, length 2, type 1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class WandbTracker:
    name = "wandb"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def open(self, run: Any, kept: Mapping[str, Any], log: Any) -> dict[str, Any]:
        import wandb

        cfg = self.cfg
        run_id = kept.get("run_id") or cfg.resume_run_id or secrets.token_hex(4)
        mode = cfg.mode
        if mode == "online" and not has_credentials(cfg.api_key, cfg.base_url):
            mode = "offline"
            log("info", f"W&B: no credentials found (stats.wandb.api_key, WANDB_API_KEY or wandb login): run {run_id} "
                        f"is written offline under {run.path / 'wandb'}; upload it with: wandb sync "
                        f"{run.path / 'wandb'}/offline-run-*")
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False,
                                  api_key=cfg.api_key, base_url=cfg.base_url or os.environ.get("WANDB_BASE_URL", SERVER))
        self._run = wandb.init(dir=str(run.path), id=run_id, resume="allow", mode=mode,
                               project=cfg.project or run.experiment, entity=cfg.entity, name=cfg.name or run.name,
                               group=cfg.group or run.group, notes=cfg.notes, tags=[*run.tags, *cfg.tags],
                               config=dict(run.params), settings=settings, reinit="create_new")
        out = {"run_id": run_id, "mode": mode}
        if mode == "offline":
            held = held_rows(run.path / "wandb", run_id)
            if held is not None:
                out["rows"] = held
        return out

    def log(self, rows: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        for step, metrics in rows:
            self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        import wandb

        self._run.finish()
        if wandb.run is None:  # no run of the caller's own: end W&B's process now, not in an exit hook
            wandb.teardown()


def has_credentials(api_key: str | None, base_url: str | None) -> bool:
    """Whether W&B would find an API key: given, in ``WANDB_API_KEY``, or in ``.netrc`` for the server."""
    if api_key or os.environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(base_url or os.environ.get("WANDB_BASE_URL") or SERVER).hostname or ""
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def held_rows(wandb_dir: Path, run_id: str) -> int | None:
    """The rows the run's offline files hold (a history record each); None when there are none, or one does not
    read."""
    try:
        return sum(r.WhichOneof("record_type") == "history" for r in records(wandb_dir, run_id))
    except (OSError, ValueError, ImportError):
        return None


def records(wandb_dir: Path, run_id: str) -> list[Any]:
    """The records of run ``run_id``'s offline transaction logs under ``wandb_dir``, oldest file first, each a
    ``wandb_internal_pb2.Record`` (see the module's doc); ``ValueError`` for a file that is not one."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for path in sorted(Path(wandb_dir).glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")):
        for data in _framed(path.read_bytes(), path):
            record = pb.Record()
            record.ParseFromString(data)
            out.append(record)
    return out


def _framed(data: bytes, path: Path) -> Iterator[bytes]:
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B transaction log")
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + HEADER])
        if pos + HEADER + length > len(data) or kind not in (FULL, FIRST, MIDDLE, LAST):
            return  # a record cut short by a kill, or the zeroes after the last
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        else:
            yield pending + chunk
            pending = b""
