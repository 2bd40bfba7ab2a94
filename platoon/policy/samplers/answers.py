"""Judging a task sampler's answers, and the fallbacks that replace a non-core sampler's failures (2.7).

Rules it keeps:
- an answer is accepted only when it is a pool task (resolved to the first row with that id; eligible, for an
  adaptive decision), an internal `Row` from a core class, or a `Slot` from a slot-handing static run sampler for
  an entry that has a sampler; a reason is a non-empty string of at most 64 characters, a score None or finite;
- a fallback keeps no state, so a resume reproduces it: a slot by weight from ``Random(key)``, a static decision's
  row ``key % rows``, an adaptive decision's ``key % count`` among the eligible first rows of their ids.

`check_task_sampler` judges answers with these same functions.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from platoon.policy.samplers.base import Draw, Row, SamplerSetup, Slot, check_reason, check_score


def accept(
    answer: Any,
    setup: SamplerSetup,
    *,
    core: bool,
    adaptive: bool,
    slots: bool,
    slot_entries: Sequence[str] | frozenset[str] = (),
    mask: np.ndarray | None = None,
    uid_of_row: np.ndarray | None = None,
) -> tuple[str, Any, str, float | None]:
    """Judge a sampler's (non-None) answer as the dispatcher does; ValueError saying why it is refused.

    Returns ``("row", index into setup.task_ids, reason, score)`` or ``("slot", entry, "order", None)``. ``slots``:
    the sampler is the run's and hands slots; ``mask``: eligibility per distinct id (adaptive decisions);
    ``uid_of_row``: each row's index into ``setup.unique_ids`` (computed when not given).
    """
    if isinstance(answer, Slot):
        if adaptive or not slots:
            raise ValueError(
                f"answered {answer!r}, but only a static run sampler with entry_slots hands slots"
            )
        if answer.entry not in slot_entries:
            raise ValueError(f"answered a slot for {answer.entry!r}, which is not an entry with a sampler")
        return ("slot", answer.entry, "order", None)
    if isinstance(answer, Row):
        if not core:
            raise ValueError("answered an internal Row, which only core's samplers may")
        index = answer.index
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(setup.task_ids):
            raise ValueError(f"answered row {index!r}, outside the pool's {len(setup.task_ids)} rows")
        reason, score = check_reason(answer.reason), check_score(answer.score)
        task_id = setup.task_ids[index]
    elif isinstance(answer, str | Draw):
        draw = Draw(answer) if isinstance(answer, str) else answer
        try:  # judged here, where the answer is accepted: Draw itself takes whatever it is given (as in 0.4.0)
            reason, score = check_reason(draw.reason), check_score(draw.score)
        except ValueError as exc:
            raise ValueError(f"answered {draw!r}, which it may not: {exc}") from None
        task_id = draw.task_id
        first = setup.first_index.get(task_id) if isinstance(task_id, str) else None
        if first is None:
            raise ValueError(f"answered task {task_id!r}, which is not in its pool")
        index = first
    else:
        raise ValueError(f"answered {answer!r}; a sampler answers a Draw, a pool task id, a Slot or None")
    if adaptive and mask is not None:
        uid = uid_index(setup, uid_of_row)[index]
        if not mask[uid]:
            raise ValueError(f"answered task {task_id!r}, which is not eligible now")
    return ("row", index, reason, score)


def uid_index(setup: SamplerSetup, uid_of_row: np.ndarray | None) -> np.ndarray:
    if uid_of_row is not None:
        return uid_of_row
    pos = {t: i for i, t in enumerate(setup.unique_ids)}
    return np.fromiter((pos[t] for t in setup.task_ids), dtype=np.int64, count=len(setup.task_ids))


def weighted_fallback_entry(key: int, entries: Sequence[tuple[str, float]]) -> str:
    """The fallback slot's entry: ``u = Random(key).random() * sum(weights)``, the first entry where ``u`` minus
    the weights so far drops below 0 (the last if none does)."""
    u = random.Random(key).random() * sum(w for _, w in entries)
    for name, w in entries:
        u -= w
        if u < 0:
            return name
    return entries[-1][0]


def fallback_row(key: int, setup: SamplerSetup, mask: np.ndarray | None) -> int:
    """A static decision's fallback row ``key % rows``; an adaptive one's first row of the eligible id at
    ``key % count`` (``mask``: eligibility per distinct id, with something eligible)."""
    if mask is None:
        return key % len(setup.task_ids)
    eligible = np.flatnonzero(mask)
    return setup.first_index[setup.unique_ids[int(eligible[key % len(eligible)])]]


def options_json(options: Any) -> Any:
    if isinstance(options, BaseModel):
        return options.model_dump(mode="json")
    if is_dataclass(options) and not isinstance(options, type):
        return asdict(options)
    return json.loads(json.dumps(options, default=str)) if options is not None else {}


def check_json(data: Any, path: str = "state") -> None:
    """Raise ValueError unless ``data`` is JSON data with string keys at every depth."""
    if isinstance(data, Mapping):
        for k, v in data.items():
            if not isinstance(k, str):
                raise ValueError(f"{path} has a non-string key {k!r}")
            check_json(v, f"{path}.{k}")
    elif isinstance(data, list | tuple):
        for i, v in enumerate(data):
            check_json(v, f"{path}[{i}]")
    elif not (
        data is None
        or isinstance(data, str | bool | int)
        or (isinstance(data, float) and math.isfinite(data))
    ):
        raise ValueError(f"{path} holds {type(data).__name__} {data!r}, not JSON data")
