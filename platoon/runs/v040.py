"""Run directories that platoon 0.4.0 wrote, read as they are (docs/run-directory.md, "Run directories of platoon
0.4.0").

0.4.0 (on Tinker) lays a run out differently from this platoon:

- ``config.resolved.yaml``: the run's config as resolved (0.4.0's ``lock.json`` holds no config);
- ``checkpoints.jsonl``: one row per save, written by tinker_cookbook: ``{name, batch, state_path, sampler_path,
  wandb_run_id, policy_version, optimizer_steps, tasks?, dispatch?, next_position?}``. ``name`` is
  ``recovery-<batch:06d>``, ``<batch:06d>``, ``<batch:06d>_interrupted`` or ``final``; the weights live on the Tinker
  service (``state_path``), not in the directory. ``tasks`` is ``{file, sha256, format: 1, start}`` and ``dispatch``
  ``{file, sha256, format: 2, start, kept?}``, each ``file`` relative to the run directory;
- ``tasks/state-s<start>-<name>.json``, ``tasks/dispatch-s<start>-<name>.json`` and
  ``tasks/kept-s<start>-<name>.json.gz`` (the groups that settled and no step consumed: gzip of
  ``{format: 1, groups: [{key, entry, label, record, output}]}``) beside ``tasks/events.jsonl``, whose events are
  this platoon's;
- no metrics file: 0.4.0 logs its step metrics to the console and to Weights & Biases only.

A row of this platoon's ``checkpoints.jsonl`` names its files under ``files``; a 0.4.0 row never does: that is how
:func:`is_v040_run` tells the layouts apart.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from platoon.runs.checkpoints import CheckpointError, kept_rows, read_checkpoint_bytes
from platoon.runs.jsonl import read_jsonl
from platoon.runs.kept import live_datum
from platoon.runs.rundir import PathLike, RunDir, as_run_dir

#: The file 0.4.0 writes its resolved config to.
V040_CONFIG = "config.resolved.yaml"
#: The dispatch state formats 0.4.0 writes and reads; the kept-groups file's format.
V040_DISPATCH_FORMATS = (1, 2)
V040_KEPT_FORMAT = 1

def is_v040_row(row: Mapping[str, Any]) -> bool:
    """Whether a ``checkpoints.jsonl`` row is one platoon 0.4.0 wrote: it has a ``name`` and no ``files``."""
    return isinstance(row.get("name"), str) and "files" not in row


def is_v040_run(run_dir: RunDir | PathLike) -> bool:
    """Whether the run directory is in platoon 0.4.0's layout: its checkpoint rows are all 0.4.0's, or it has none
    and holds 0.4.0's ``config.resolved.yaml``."""
    rd = as_run_dir(run_dir)
    rows = read_jsonl(rd.checkpoints_path)
    if rows:
        return all(is_v040_row(row) for row in rows)
    return (rd.path / V040_CONFIG).is_file()


def read_v040_file(run_dir: RunDir | PathLike, record: Mapping[str, Any]) -> bytes:
    """The bytes of the file a 0.4.0 record names (``{file, sha256, ...}``), checked against its SHA-256. Raises
    CheckpointError naming the file when the record names none, or the file is missing, outside the run, or
    changed."""
    rd = as_run_dir(run_dir)
    name = record.get("file") if isinstance(record, Mapping) else None
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"the checkpoint names no file: {record!r}", path=rd.checkpoints_path)
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise CheckpointError(f"{name}: not a path inside the run directory", path=rd.checkpoints_path)
    path = rd.path / rel
    data = read_checkpoint_bytes(path, name)
    if hashlib.sha256(data).hexdigest() != str(record.get("sha256", "")).lower():
        raise CheckpointError(f"{name}: checksum mismatch (not the SHA-256 its checkpoint recorded)", path=path)
    return data


def _json_object(run_dir: RunDir, record: Mapping[str, Any], data: bytes) -> dict:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise CheckpointError(f"{record.get('file')}: not JSON ({exc})", path=run_dir.path / str(record["file"])) from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{record.get('file')}: not a JSON object", path=run_dir.path / str(record["file"]))
    return value


@dataclass(frozen=True)
class V040Snapshot:
    """The newest statistics snapshot of a 0.4.0 run that reads back: its checkpoint row, the snapshot, and one
    note per newer row passed over (newest first)."""

    row: dict
    snapshot: dict
    passed_over: list[str]


def latest_v040_snapshot(run_dir: RunDir | PathLike) -> V040Snapshot:
    """The newest row of a 0.4.0 run whose statistics snapshot (``tasks``) reads back, as 0.4.0's ``platoon tasks``
    takes it: rows that name none are passed over in silence, each newer one that does not read gets a note.
    Raises CheckpointError when none reads."""
    rd = as_run_dir(run_dir)
    notes: list[str] = []
    for row in kept_rows(rd):
        record = row.get("tasks")
        if not isinstance(record, Mapping):
            continue
        try:
            snapshot = _json_object(rd, record, read_v040_file(rd, record))
        except CheckpointError as exc:
            notes.append(f"passed over checkpoint {row.get('name', '?')}: {exc}")
            continue
        return V040Snapshot(row=row, snapshot=snapshot, passed_over=notes)
    newest = f"; the newest: {notes[0]}" if notes else ""
    raise CheckpointError(f"{rd.path}: no checkpoint names a statistics snapshot that reads back{newest}",
                          path=rd.checkpoints_path, problems=notes)


def v040_policy_version(row: Mapping[str, Any]) -> int:
    """The policy version a 0.4.0 checkpoint row stands at: its ``policy_version``, else its ``batch``, else 0."""
    for key in ("policy_version", "batch"):
        value = row.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def read_v040_dispatch(run_dir: RunDir | PathLike, row: Mapping[str, Any]) -> dict:
    """The dispatcher state a 0.4.0 checkpoint row names (``dispatch``), as this platoon's resume reads a format-2
    state (its samplers' records name the built-in samplers by 0.4.0's class paths, which the sampler runtime takes
    as its own), with ``policy_version`` from the row. Its ``kept`` record is left as 0.4.0 wrote it (see
    :func:`read_v040_kept`). Raises CheckpointError naming the file when it does not read."""
    rd = as_run_dir(run_dir)
    record = row.get("dispatch")
    if not isinstance(record, Mapping):
        raise CheckpointError(f"checkpoint {row.get('name', '?')} saved no dispatcher state", path=rd.checkpoints_path)
    state = _json_object(rd, record, read_v040_file(rd, record))
    if state.get("format") not in V040_DISPATCH_FORMATS:
        raise CheckpointError(f"{record['file']}: dispatcher state format {state.get('format')!r} is not one of "
                              f"{V040_DISPATCH_FORMATS}", path=rd.path / str(record["file"]))
    state["policy_version"] = v040_policy_version(row)
    return state


def read_v040_kept(run_dir: RunDir | PathLike, kept: Mapping[str, Any]) -> list[dict]:
    """The groups a 0.4.0 dispatcher state's ``kept`` record names (``{key, entry, label, record, output}`` each, in
    the order they settled), checked against its SHA-256. Raises CheckpointError when it does not read."""
    rd = as_run_dir(run_dir)
    data = read_v040_file(rd, kept)
    path = rd.path / str(kept["file"])
    try:
        value = json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError) as exc:
        raise CheckpointError(f"{kept['file']}: not gzip-compressed JSON ({exc})", path=path) from None
    if not isinstance(value, dict) or value.get("format") != V040_KEPT_FORMAT or not isinstance(value.get("groups"), list):
        raise CheckpointError(f"{kept['file']}: holds no kept groups of format {V040_KEPT_FORMAT}", path=path)
    return value["groups"]


def read_v040_config(run_dir: RunDir | PathLike) -> Path:
    """The path of a 0.4.0 run's resolved config (``config.resolved.yaml``); FileNotFoundError when it has none."""
    path = as_run_dir(run_dir).path / V040_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (platoon 0.4.0 writes the run's resolved config there)")
    return path


__all__ = [
    "V040_CONFIG",
    "V040Resume",
    "V040Snapshot",
    "is_v040_row",
    "is_v040_run",
    "latest_v040_snapshot",
    "read_v040_config",
    "read_v040_dispatch",
    "read_v040_file",
    "read_v040_kept",
    "tokenizer_matches",
    "v040_model_name",
    "v040_resume",
    "v040_policy_version",
]


@dataclass(frozen=True)
class V040Resume:
    """What a resume from a 0.4.0 run takes up (:func:`v040_resume`): the checkpoint row, the dispatcher state as
    this platoon's resume reads it, the statistics snapshot (None when none reads), what it could not take up, one
    line each, and how many kept groups it trains (``kept``) and draws again (``reissued``)."""

    row: dict
    state: dict
    snapshot: dict | None
    warnings: list[str]
    kept: int = 0
    reissued: int = 0


def v040_resume(run_dir: RunDir | PathLike, *, same_tokenizer: bool = False,
                vocab_size: int | None = None) -> V040Resume:
    """The newest checkpoint of a 0.4.0 run whose dispatcher state reads back, ready for this platoon's resume by
    reissue (``dispatch_state.resume``): samplers at their saved counts and states, the outstanding draws, waiting
    draws and tokens as saved.

    0.4.0's kept groups hold Tinker datums: the token ids and loss inputs of the model its Tinker service trained.
    With ``same_tokenizer`` (the resumed run's model reads the same token ids: :func:`tokenizer_matches`) each group
    whose datums map to live datums (``platoon.runs.kept.live_datum``, ids below ``vocab_size``), or that failed,
    is kept: it goes where this platoon's own state keeps its settled groups (``exact.queue``, the only part of
    ``exact`` that resume reads; ``kept.groups`` names them), and the steps train it first. Every other kept group
    (all of them without ``same_tokenizer``: their outcomes are another model's) is drawn again, in ``(start,
    seq)`` order with the other outstanding draws, and a warning says how many and why. Their settled records are
    already counted in the snapshot. Raises CheckpointError when no checkpoint's state reads."""
    rd = as_run_dir(run_dir)
    notes: list[str] = []
    for row in kept_rows(rd):
        if not isinstance(row.get("dispatch"), Mapping):
            continue
        try:
            state = read_v040_dispatch(rd, row)
        except CheckpointError as exc:
            notes.append(f"passed over checkpoint {row.get('name', '?')}: {exc}")
            continue
        warnings = list(notes)
        items, reissued = _kept_items(rd, row, state, same_tokenizer, vocab_size, warnings)
        state["kept"] = {"groups": [item["key"] for item in items]} if items else None
        state["exact"] = {"queue": items}
        snapshot = None
        if isinstance(row.get("tasks"), Mapping):
            try:
                snapshot = _json_object(rd, row["tasks"], read_v040_file(rd, row["tasks"]))
            except CheckpointError as exc:
                warnings.append(f"checkpoint {row.get('name')}: its statistics do not read ({exc}); they start empty")
        return V040Resume(row=row, state=state, snapshot=snapshot, warnings=warnings, kept=len(items),
                          reissued=reissued)
    raise CheckpointError(f"{rd.path}: no checkpoint names a dispatcher state that reads back"
                          + (f"; the newest: {notes[0]}" if notes else ""), path=rd.checkpoints_path, problems=notes)


def _kept_items(rd: RunDir, row: Mapping[str, Any], state: Mapping[str, Any], same_tokenizer: bool,
                vocab_size: int | None, warnings: list[str]) -> tuple[list[dict], int]:
    """The kept groups of ``state`` that this platoon trains, as ``SettledGroup.to_json()`` gives a settled group,
    and how many it draws again instead (each reason a line of ``warnings``)."""
    kept = state.get("kept")
    if not isinstance(kept, Mapping) or not kept.get("groups"):
        return [], 0
    name = row.get("name")
    count = len(kept["groups"])
    if not same_tokenizer:
        warnings.append(f"checkpoint {name}: its {count} kept group(s) hold platoon 0.4.0's Tinker datums of another "
                        "model (train.model_name is not the model 0.4.0 trained): their tasks are drawn again")
        return [], count
    try:
        groups = read_v040_kept(rd, kept)
    except CheckpointError as exc:
        warnings.append(f"checkpoint {name}: its kept groups do not read ({exc}): their tasks are drawn again")
        return [], count
    positions = {(o[0], o[1]): o[3] for o in state.get("outstanding") or [] if len(o) == 4}
    items, problems = [], []
    for group in groups:
        try:
            items.append(_settled_json(group, positions, vocab_size))
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{group.get('key') if isinstance(group, Mapping) else group}: {exc}")
    if problems:
        warnings.append(f"checkpoint {name}: {len(problems)} of its {count} kept group(s) do not map to this "
                        f"trainer's datums, so their tasks are drawn again (the first: {problems[0]})")
    return items, count - len(items)


def _settled_json(group: Mapping[str, Any], positions: Mapping[tuple[int, int], int],
                  vocab_size: int | None) -> dict:
    """A 0.4.0 kept group (``{key, entry, label, record, output}``) as this platoon's settled group's JSON."""
    key = (int(group["key"][0]), int(group["key"][1]))
    record, output = group["record"], group["output"]
    version = _oldest_version(record)
    kind, ours = "admitted", None
    if output["type"] == "failed":
        kind = "failed"
    elif output["type"] in ("group", "datums"):
        members = output["members"] if output["type"] == "group" else record["members"]
        verdict = output["verdict"] if output["type"] == "group" else record["verdict"]
        datums = [live_datum(d, version=version, vocab_size=vocab_size) for d in output["datums"]]
        ours = {"verdict": verdict, "members": list(members), "datums": datums}
    else:
        raise ValueError(f"an output of type {output['type']!r}")
    position = positions.get(key, record.get("position"))
    return {"key": list(key), "task_id": record["task_id"], "entry": group.get("entry"), "position": position,
            "output": ours, "record": record, "kind": kind, "reason": None, "window": 0, "held": False}


def _oldest_version(record: Mapping[str, Any]) -> int:
    """The oldest policy version a group's members sampled (``versions.main``), else the one it was drawn at."""
    spans = [m["versions"]["main"][0] for m in record.get("members") or []
             if isinstance(m.get("versions"), Mapping) and "main" in m["versions"]]
    return int(min(spans)) if spans else int((record.get("drawn_at") or {}).get("main", 0))


def v040_model_name(run_dir: RunDir | PathLike) -> str | None:
    """``train.model_name`` of a 0.4.0 run's ``config.resolved.yaml`` (None when it names none or does not read)."""
    import yaml

    try:
        data = yaml.safe_load(read_v040_config(run_dir).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    name = (data.get("train") or {}).get("model_name") if isinstance(data, Mapping) else None
    return name if isinstance(name, str) else None


def tokenizer_matches(theirs: str | None, ours: str) -> bool:
    """Whether a model named ``ours`` (``train.model_name`` here: ``tiny`` or a local checkpoint) reads the token ids
    of 0.4.0's ``theirs`` (a Tinker base model's name): the same name, or a local checkpoint whose
    ``config.json`` says it was saved from that model (``_name_or_path``). The built-in ``tiny`` model has a
    vocabulary of its own and never matches. A matching name is not proof: each datum's ids are also checked
    against the vocabulary (:func:`v040_resume`)."""
    if not theirs or ours == "tiny":
        return False
    if ours == theirs:
        return True
    try:
        config = json.loads((Path(ours).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("_name_or_path") == theirs
