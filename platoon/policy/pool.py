"""`TaskRow` and `TaskPool`: the run's training tasks in listing order, entries in config order.

The pool is what the samplers draw from and what the per-task statistics are kept over. It knows nothing of the
config models: a runtime builds one `EntrySpec` per environment entry from its config and calls
`TaskPool.from_entries`. Rules it keeps:
- a row's ``index`` is its place in the pool; rows of one entry are contiguous, entries in the order given;
- ``entries`` holds only entries that have training tasks, each with its ``index`` among those;
- a row's ``task_id`` is its pool id, the one name of the task everywhere in the policy layer (samplers, statistics,
  events, dispatch state): in a mixture (more than one entry) ``<entry>::<environment task id>``, with one entry the
  environment's id itself (``pool_task_id``; platoon 0.4.0's form). ``env_task_id`` is the environment's own id,
  the one to ask the environment for. An entry's name holds no ``::`` (the config refuses it), so
  ``split_pool_task_id`` reads the entry back;
- a task id may repeat within an entry: ``first_index`` names its first row, which is the row a sampler's `Draw` of
  that id means (across entries of a mixture the pool ids differ);
- a row's label (its ``label_column`` value) defaults to its entry's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from platoon.policy.samplers.base import EntryInfo

DEFAULT_LABEL_COLUMN = "_platoon_environment"
POOL_ID_SEPARATOR = "::"
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def pool_task_id(entry: str, task_id: str, mixture: bool) -> str:
    """The pool id of environment task ``task_id`` of entry ``entry``: ``<entry>::<task_id>`` in a mixture (two
    entries may name the same environment task), else ``task_id`` itself."""
    return f"{entry}{POOL_ID_SEPARATOR}{task_id}" if mixture else task_id


def split_pool_task_id(pool_id: str, mixture: bool) -> tuple[str | None, str]:
    """``(entry, environment task id)`` of a pool id, the inverse of `pool_task_id`; the entry is None outside a
    mixture. ValueError for a mixture's id without an entry (no ``::``)."""
    if not mixture:
        return None, pool_id
    entry, sep, task_id = pool_id.partition(POOL_ID_SEPARATOR)
    if not sep:
        raise ValueError(f"a mixture's task id reads <entry>{POOL_ID_SEPARATOR}<task id>, got {pool_id!r}")
    return entry, task_id


def label_prefix(column: str, label: str) -> str:
    """The metric prefix of ``label``, saying what it groups by: ``environment/<label>`` for the default column (a
    label is an entry's name), else ``<column>/<label>`` (``train.label_by``); ``/`` in either is written ``--``."""
    by = "environment" if column == DEFAULT_LABEL_COLUMN else column.replace("/", "--")
    return f"{by}/{label.replace('/', '--')}"


def label_value(value: Any) -> str | None:
    """A row's label from its ``train.label_by`` column: booleans read ``true``/``false``, numbers as strings, and
    an empty or missing value is None (no label)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class TaskRow:
    """One training task of the pool: its place, pool id, entry, label, the entry's group size and success
    threshold, the row's own data (as listed; never mutated) and the environment's id of the task
    (``env_task_id``; a row built without it reads ``task_id``)."""

    index: int
    task_id: str
    entry: str
    label: str | None
    group_size: int
    success_threshold: float = 1.0
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, compare=False, hash=False)
    env_task_id: str | None = None

    def __post_init__(self) -> None:
        if self.env_task_id is None:
            object.__setattr__(self, "env_task_id", self.task_id)


@dataclass(frozen=True)
class EntrySpec:
    """An environment entry as the pool needs it. ``task_ids`` are the environment's ids (the pool forms its own,
    `pool_task_id`). ``weight`` None means ``weight: tasks`` (its number of tasks).
    ``label`` is the label of every row (a string), of each row (a sequence), or None: the entry's name.
    ``data`` optionally gives each row's data, parallel to ``task_ids``."""

    name: str
    task_ids: Sequence[str]
    group_size: int
    weight: float | None = 1.0
    seed: int = 0
    success_threshold: float = 1.0
    label: str | Sequence[str | None] | None = None
    data: Sequence[Mapping[str, Any]] | None = None


class TaskPool:
    """The run's training tasks in listing order, with the entries that have some."""

    def __init__(
        self,
        rows: Sequence[TaskRow],
        *,
        entries: Mapping[str, EntryInfo] | None = None,
        label_column: str = DEFAULT_LABEL_COLUMN,
    ) -> None:
        self.rows: tuple[TaskRow, ...] = tuple(rows)
        for i, row in enumerate(self.rows):
            if row.index != i:
                raise ValueError(f"pool row {i} says its index is {row.index}")
        self.label_column = label_column
        by_entry: dict[str, list[int]] = {}
        for row in self.rows:
            by_entry.setdefault(row.entry, []).append(row.index)
        self._by_entry = {name: tuple(ix) for name, ix in by_entry.items()}
        self._entry_rows: dict[str, tuple[TaskRow, ...]] = {}
        if entries is None:
            entries = {}
            for k, (name, ix) in enumerate(self._by_entry.items()):
                first = self.rows[ix[0]]
                ids = tuple(self.rows[i].task_id for i in ix)
                entries[name] = EntryInfo(
                    first.group_size, first.success_threshold, name, float(len(ids)), 0, k, ids
                )
        missing = set(self._by_entry) - set(entries)
        if missing:
            raise ValueError(f"rows name entries {sorted(missing)} that the pool's entries lack")
        self.entries: dict[str, EntryInfo] = {n: e for n, e in entries.items() if n in self._by_entry}
        self.task_ids: tuple[str, ...] = tuple(r.task_id for r in self.rows)
        self._first: dict[str, int] = {}
        for row in self.rows:
            self._first.setdefault(row.task_id, row.index)

    @classmethod
    def from_entries(
        cls, entries: Sequence[EntrySpec], *, label_column: str = DEFAULT_LABEL_COLUMN
    ) -> TaskPool:
        """The pool of ``entries`` in their order; an entry without tasks is left out of ``entries``. With more
        than one entry (a mixture) every row's id is ``<entry>::<environment id>``; ValueError for an entry name
        with ``::`` there (its ids would not split back)."""
        rows: list[TaskRow] = []
        infos: dict[str, EntryInfo] = {}
        names = [spec.name for spec in entries]
        if len(set(names)) != len(names):
            raise ValueError(f"entry names repeat: {names}")
        mixture = len(entries) > 1
        if mixture and any(POOL_ID_SEPARATOR in n for n in names):
            raise ValueError(f"an entry name of a mixture holds no {POOL_ID_SEPARATOR!r}: {names}")
        for spec in entries:
            env_ids = tuple(str(t) for t in spec.task_ids)
            if not env_ids:
                continue
            ids = tuple(pool_task_id(spec.name, t, mixture) for t in env_ids)
            if isinstance(spec.label, str) or spec.label is None:
                labels: Sequence[str | None] = [spec.name if spec.label is None else spec.label] * len(ids)
            else:
                labels = list(spec.label)
            data = list(spec.data) if spec.data is not None else [_EMPTY] * len(ids)
            if len(labels) != len(ids) or len(data) != len(ids):
                raise ValueError(
                    f"entry {spec.name!r}: labels and data must be parallel to its {len(ids)} tasks"
                )
            weight = float(len(ids)) if spec.weight is None else float(spec.weight)
            infos[spec.name] = EntryInfo(
                group_size=int(spec.group_size),
                success_threshold=float(spec.success_threshold),
                name=spec.name,
                weight=weight,
                seed=int(spec.seed),
                index=len(infos),
                task_ids=ids,
            )
            for task_id, env_id, label, row_data in zip(ids, env_ids, labels, data, strict=True):
                rows.append(
                    TaskRow(
                        len(rows),
                        task_id,
                        spec.name,
                        label,
                        int(spec.group_size),
                        float(spec.success_threshold),
                        row_data,
                        env_id,
                    )
                )
        return cls(rows, entries=infos, label_column=label_column)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> TaskRow:
        return self.rows[index]

    def by_entry(self, entry: str) -> tuple[TaskRow, ...]:
        """The rows of entry ``entry`` in listing order (empty for an entry without tasks)."""
        rows = self._entry_rows.get(entry)
        if rows is None:
            rows = self._entry_rows[entry] = tuple(self.rows[i] for i in self._by_entry.get(entry, ()))
        return rows

    def entry_indices(self, entry: str) -> tuple[int, ...]:
        """The pool indices of entry ``entry``'s rows."""
        return self._by_entry.get(entry, ())

    def first_index(self, task_id: str) -> int | None:
        """The index of the first row with ``task_id``, or None."""
        return self._first.get(task_id)

    def labels(self) -> tuple[str, ...]:
        """The distinct labels of the rows, in listing order."""
        return tuple(dict.fromkeys(r.label for r in self.rows if r.label is not None))
