"""Kept groups in platoon 0.4.0's file format, both ways (docs/run-directory.md, "Kept groups").

A full checkpoint's kept groups are the settled groups that no step has consumed yet. This platoon's own resume
reads them from the dispatch state's ``exact`` section; beside it every checkpoint that keeps any writes them as
platoon 0.4.0 does, so that 0.4.0 reads a dispatch state this platoon wrote, kept groups included:

- ``tasks/kept-<name>.json.gz`` in the checkpoint's directory: gzip (level 1, mtime 0, so the bytes are a function of
  the groups) of the compact JSON ``{"format": 1, "groups": [{key, entry, label, record, output}, ...]}`` and a
  newline, the groups in the order they settled;
- the dispatch state's ``kept`` is ``{file, sha256, format: 1, groups: [[start, seq], ...]}`` and the row's
  ``dispatch`` record names the file under ``kept``. ``file`` is relative to the directory the ``dispatch`` record's
  own ``file`` is (the checkpoint's), which is where 0.4.0's reader looks for both.

A group's ``output`` is ``{"type": "failed"}`` (its workflow raised), ``{"type": "group", "datums": [...], ...}`` when
every datum is one of the live backend's (``platoon.live.training.datums``), written as the Tinker datums 0.4.0 trains
(``model_input`` the tokens but the last, ``loss_fn_inputs`` ``target_tokens``, ``logprobs``, ``advantages`` and
``mask``, shifted by one; floats as the bytes of their float32 values, float64 where a float32 does not hold them),
else ``{"type": "platoon", verdict, members, datums}`` (the simulator's datums), which 0.4.0 does not take up: it
rolls such a file's groups out again, as it does any group it cannot keep.

The other way, :func:`live_datum` maps a 0.4.0 Tinker datum to a live datum when it has that shape, and says why
not when it does not.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from platoon.policy import member_rows
from platoon.runs.atomic import sha256_bytes

KEPT_FORMAT = 1
#: What a Tinker datum's ``loss_fn_inputs`` may hold (``mask`` is optional: 0.4.0's cookbook writes it).
TINKER_INPUTS = frozenset({"target_tokens", "logprobs", "advantages", "mask"})
#: 0.4.0's ``RolloutWorkload`` fields, which a ``group`` output carries (zero here: this backend counts them apart).
WORKLOAD_FIELDS = ("environment_steps", "model_calls", "input_tokens", "output_tokens", "trajectories",
                   "postmerge_datums", "policy_eligible_datums", "post_sampling_datums")
LIVE_DATUM_KEYS = frozenset({"tokens", "mask", "logprobs", "advantage", "version"})


def kept_file_name(name: str) -> str:
    """The kept groups' file of checkpoint ``name``, relative to its directory: ``tasks/kept-<name>.json.gz``."""
    return f"tasks/kept-{name}.json.gz"


def kept_bytes(groups: Sequence[Mapping[str, Any]]) -> bytes:
    """The file's bytes: the same groups give the same bytes."""
    text = json.dumps({"format": KEPT_FORMAT, "groups": list(groups)}, separators=(",", ":"), allow_nan=False)
    return gzip.compress((text + "\n").encode(), compresslevel=1, mtime=0)


def add_kept_file(files: dict[str, object], row: dict[str, Any], name: str) -> None:
    """Give the checkpoint ``name`` (``files`` and ``row`` as ``Driver.checkpoint`` returns them) its kept groups'
    file when its dispatch state keeps any: the file joins ``files``, the state's ``kept`` gets its ``file``,
    ``sha256``, ``format`` and ``groups``, the row's ``dispatch`` record its ``kept``."""
    record = row.get("dispatch")
    state = files.get(record.get("file")) if isinstance(record, Mapping) else None
    kept = state.get("kept") if isinstance(state, dict) else None
    if not isinstance(kept, Mapping) or not kept.get("groups"):
        return
    keys = [list(k) for k in kept["groups"]]
    by_key = {tuple(g["key"]): g for g in (state.get("exact") or {}).get("queue", [])}
    data = kept_bytes([kept_group(by_key[tuple(k)]) for k in keys])
    file = kept_file_name(name)
    files[file] = data
    state["kept"] = {"file": file, "sha256": sha256_bytes(data), "format": KEPT_FORMAT, "groups": keys}
    record["kept"] = file


def kept_group(item: Mapping[str, Any]) -> dict[str, Any]:
    """One settled group (``SettledGroup.to_json()``) as 0.4.0 keeps it: ``{key, entry, label, record, output}``."""
    record = item["record"]
    labels = list((record.get("labels") or {}).values())
    return {"key": list(item["key"]), "entry": item["entry"], "label": labels[0] if len(labels) == 1 else None,
            "record": record, "output": _output(item["output"], item["entry"], labels[0] if labels else None)}


def _output(output: Mapping[str, Any] | None, entry: str | None, label: str | None) -> dict[str, Any]:
    if output is None:
        return {"type": "failed"}
    datums, members = list(output["datums"]), member_rows(output["members"])
    if not all(isinstance(d, Mapping) and set(d) == LIVE_DATUM_KEYS for d in datums):
        return {"type": "platoon", **output}
    return {"type": "group", "datums": [tinker_datum(d) for d in datums],
            "workload": dict.fromkeys(WORKLOAD_FIELDS, 0), "requested_rollouts": len(members),
            "observed_rollouts": len(members), "trainable_rollouts": sum(1 for m in members if m.get("valid")),
            "task_retained_datums": len(datums), "rollout_stats": None, "group_stats": [], "label": label,
            "entry": entry, "members": members, "verdict": output["verdict"]}


# ----------------------------------------------------------------------------------------------- tinker datums
def tinker_datum(datum: Mapping[str, Any]) -> dict[str, Any]:
    """A live datum as 0.4.0 encodes a Tinker datum: the input is every token but the last, each loss input is
    about the token after its position."""
    tokens, mask = list(datum["tokens"]), list(datum["mask"])
    advantage = float(datum["advantage"])
    return {"model_input": {"chunks": [{"tokens": tokens[:-1], "type": "encoded_text"}]},
            "loss_fn_inputs": {
                "target_tokens": {"dtype": "int64", "shape": [len(tokens) - 1], "data": tokens[1:]},
                "logprobs": _floats([float(x) for x in datum["logprobs"][1:]]),
                "advantages": _floats([advantage if m else 0.0 for m in mask[1:]]),
                "mask": _floats([float(m) for m in mask[1:]]),
            }}


def live_datum(data: Any, *, version: int, vocab_size: int | None = None) -> dict[str, Any]:
    """A 0.4.0 Tinker datum (as its kept groups encode it) as a live datum of policy ``version``; ValueError saying
    why it has not that shape: chunks other than text, loss inputs other than :data:`TINKER_INPUTS`, targets that
    are not the input shifted by one, masked tokens with different advantages, or token ids at or beyond
    ``vocab_size``. Without a ``mask`` input, the masked tokens are those with a log-probability or an advantage."""
    try:
        chunks = data["model_input"]["chunks"]
        if any(c.get("type") != "encoded_text" for c in chunks):
            raise ValueError("its input holds chunks other than text (images?)")
        inputs = [int(t) for c in chunks for t in c["tokens"]]
        loss = data["loss_fn_inputs"]
        if not {"target_tokens", "logprobs", "advantages"} <= set(loss) <= TINKER_INPUTS:
            raise ValueError(f"its loss inputs are {sorted(loss)}, not target_tokens, logprobs, advantages, mask")
        targets = [int(t) for t in _values(loss["target_tokens"])]
        logprobs, advantages = _values(loss["logprobs"]), _values(loss["advantages"])
        mask = _values(loss["mask"]) if "mask" in loss else [float(lp != 0 or a != 0)
                                                             for lp, a in zip(logprobs, advantages, strict=False)]
    except (KeyError, TypeError, AttributeError, struct.error) as exc:
        raise ValueError(f"not a Tinker datum ({type(exc).__name__}: {exc})") from None
    n = len(inputs)
    if not n or not len(targets) == len(logprobs) == len(advantages) == len(mask) == n:
        raise ValueError(f"its input has {n} tokens but its loss inputs {len(targets)}, {len(logprobs)}, "
                         f"{len(advantages)} and {len(mask)} values")
    if inputs[1:] != targets[:-1]:
        raise ValueError("its targets are not its input shifted by one")
    tokens = [inputs[0], *targets]
    if vocab_size is not None and (max(tokens) >= vocab_size or min(tokens) < 0):
        raise ValueError(f"token id {max(tokens)} is beyond this model's vocabulary ({vocab_size} ids)")
    flags = [1 if m > 0 else 0 for m in mask]
    trained = {float(a) for a, m in zip(advantages, flags, strict=True) if m}
    if len(trained) > 1 or any(a != 0 for a, m in zip(advantages, flags, strict=True) if not m):
        raise ValueError("its advantages are not one value over its sampled tokens (and 0 elsewhere)")
    return {"tokens": tokens, "mask": [0, *flags],
            "logprobs": [0.0, *(float(lp) if m else 0.0 for lp, m in zip(logprobs, flags, strict=True))],
            "advantage": trained.pop() if trained else 0.0, "version": int(version)}


def _floats(values: list[float]) -> dict[str, Any]:
    """0.4.0's float tensor: the bytes of the float32 values when they hold every value exactly, else float64."""
    encoded: dict[str, Any] = {"dtype": "float32", "shape": [len(values)]}
    try:
        single = struct.pack(f"<{len(values)}f", *values)
    except OverflowError:
        single = None
    if single is not None and all(a == b or (math.isnan(a) and math.isnan(b))
                                  for a, b in zip(struct.unpack(f"<{len(values)}f", single), values, strict=True)):
        encoded["f4"] = base64.b64encode(single).decode()
    else:
        encoded["f8"] = base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode()
    return encoded


def _values(tensor: Mapping[str, Any]) -> list[Any]:
    if "f4" in tensor or "f8" in tensor:
        code, raw = ("f", tensor["f4"]) if "f4" in tensor else ("d", tensor["f8"])
        data = base64.b64decode(raw)
        return list(struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data))
    return list(tensor["data"])


__all__ = ["KEPT_FORMAT", "add_kept_file", "kept_bytes", "kept_file_name", "kept_group", "live_datum",
           "tinker_datum"]
