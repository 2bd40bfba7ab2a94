"""The files a config's ``sim`` block names: a task population (``sim.tasks``) and measured durations (an empirical
distribution's ``file``).

What this module owns: their readers, ``read_task_file`` and ``read_durations``, which the loader calls when a config
loads (so ``config validate`` refuses what the simulator would) and the simulator calls when it builds a run, so the
two agree on every file. The formats are docs/simulator.md's.

Rules it keeps: a reader raises ValueError naming the file, the row and the problem, and nothing else (an unreadable,
undecodable, too deeply nested or oversized file included); a task id appears once; a value is finite and within
``platoon.config.bounds`` (durations at most ``MAX_SECONDS``, at most ``MAX_TASKS`` tasks).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platoon.config.bounds import MAX_SECONDS, MAX_TASKS
from platoon.config.yaml_loader import MAX_DEPTH

__all__ = ["TaskFileRow", "read_durations", "read_task_file"]


@dataclass(frozen=True)
class TaskFileRow:
    task_id: str
    pass_rate: float
    length: float = 1.0
    data: dict = field(default_factory=dict, compare=False)
    """The row's other columns (``train.label_by`` may name one)."""


def _text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


_JSON_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def _json(p: Path, text: str) -> Any:
    """``text`` parsed; nesting deeper than ``MAX_DEPTH`` is refused before the parser would recurse that deep."""
    depth = deepest = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise ValueError(f"{p}: not JSON (nested more than {MAX_DEPTH} levels deep)")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{p}: not JSON ({exc})") from None


def read_task_file(path: str | Path) -> list[TaskFileRow]:
    """A task population: CSV with columns ``task_id,pass_rate`` and optionally ``length``, or a JSON list of objects
    with those keys. Raises ValueError naming the file, the row and the problem."""
    p = Path(path)
    text = _text(p)
    if text.lstrip().startswith("["):
        raw = _json(p, text)
        where = "item"
    else:
        try:
            raw = list(csv.DictReader(io.StringIO(text)))
        except csv.Error as exc:
            raise ValueError(f"{p}: not CSV ({exc})") from None
        where = "row"
        if raw and not {"task_id", "pass_rate"} <= set(raw[0]):
            raise ValueError(f"{p}: needs columns task_id and pass_rate (and optionally length)")
    if len(raw) > MAX_TASKS:
        raise ValueError(f"{p}: holds {len(raw)} tasks; a run may have at most {MAX_TASKS}")
    rows: list[TaskFileRow] = []
    first: dict[str, int] = {}
    for n, item in enumerate(raw, 1):
        if not isinstance(item, dict) or "task_id" not in item or "pass_rate" not in item:
            raise ValueError(f"{p}: {where} {n} needs task_id and pass_rate")
        try:
            rate = float(item["pass_rate"])
            length = float(item.get("length") or 1.0)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{p}: {where} {n}: pass_rate and length must be numbers") from None
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{p}: {where} {n}: pass_rate must be in [0, 1], got {rate}")
        if not math.isfinite(length) or length <= 0:
            raise ValueError(f"{p}: {where} {n}: length must be a positive number, got {length}")
        task_id = str(item["task_id"])
        if task_id in first:
            raise ValueError(f"{p}: {where} {n}: task_id {task_id!r} repeats {where} {first[task_id]}; list each "
                             "task once")
        first[task_id] = n
        extra = {k: v for k, v in item.items() if k not in ("task_id", "pass_rate", "length")}
        rows.append(TaskFileRow(task_id, rate, length, extra))
    if not rows:
        raise ValueError(f"{p}: holds no tasks")
    return rows


def read_durations(path: str | Path) -> list[float]:
    """Measured durations in seconds from ``path``: a JSON list, a CSV with a ``seconds`` column, or one number a line
    (blank lines and ``#`` comments skipped). Raises ValueError naming the file and the problem."""
    p = Path(path)
    text = _text(p)
    values: list[float] = []
    lines = text.strip().splitlines()
    try:
        if text.lstrip().startswith("["):
            raw = _json(p, text)
            if not isinstance(raw, list):
                raise TypeError("a JSON file holds one list of seconds")
            values = [float(v) for v in raw]
        elif lines and "seconds" in lines[0].split(","):
            values = [float(row["seconds"]) for row in csv.DictReader(text.splitlines())]
        else:
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    values.append(float(line))
    except (ValueError, TypeError, KeyError, OverflowError, csv.Error) as exc:
        if str(exc).startswith(f"{p}: "):
            raise
        raise ValueError(f"{p}: not a list of durations in seconds ({exc})") from None
    if not values:
        raise ValueError(f"{p}: holds no durations")
    bad = [v for v in values if not math.isfinite(v) or not 0 <= v <= MAX_SECONDS]
    if bad:
        raise ValueError(f"{p}: durations must be finite, at least 0 and at most {MAX_SECONDS:g} s, got {bad[0]!r}")
    return values
