"""`StatsRecorder`: draw and fate bookkeeping, settled records held and applied in draw order, snapshots.

Rules it keeps (docs/task-samplers.md):
- a settled group's record is held, not applied; ``flush()`` applies the held records sorted by ``(start, seq)``
  and calls every listener (the adaptive samplers' ``observe``) after each, in that order. So the statistics do not
  depend on the order in which groups completed between two flush points. Flush points are the runtime's: before
  each adaptive decision (``store`` and ``view`` flush), at each snapshot, at each step's metrics;
- admission rules read ``peek_store()``, which does not flush: the evidence as of the last flush, the draws and
  fates as they stand now; fates never wait for a flush;
- events for ``tasks/events.jsonl`` go to an outbox (``take_events()``), with exactly the fields of 1.9: draws and
  fates as they happen, settles at settle time;
- an unexpected exception inside the recorder stops it for the rest of the start: it drops its held records, warns
  once (``take_warnings()``) and records nothing more; its snapshots are then None. Illegal input (an unknown fate,
  a draw key used twice) raises ValueError and stops nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from platoon.policy.samplers.base import TaskStatsView
from platoon.policy.stats import COLUMNS_FORMAT, FATES, SNAPSHOT_FORMAT, GroupRecord, TaskStatsStore

if TYPE_CHECKING:
    from platoon.policy.pool import TaskPool

Listener = Callable[[GroupRecord], None]


class StatsRecorder:
    """Feeds a `TaskStatsStore` in draw order and writes the events of ``tasks/events.jsonl`` to an outbox."""

    def __init__(self, store: TaskStatsStore, *, start: int = 1) -> None:
        self._store = store
        self._empty: TaskStatsStore | None = None
        self.start = int(start)
        self.next_seq = 0
        self.stopped = False
        self._held: list[GroupRecord] = []
        self._listeners: list[Listener] = []
        self._events: list[dict[str, Any]] = []
        self._warnings: list[str] = []

    @classmethod
    def for_pool(cls, pool: TaskPool, *, start: int = 1, group_size: int | None = None) -> StatsRecorder:
        """A recorder over an empty store of ``pool``'s tasks and entries."""
        tasks = [(r.task_id, r.entry, r.label) for r in pool.rows]
        entries = {name: (e.group_size, e.success_threshold) for name, e in pool.entries.items()}
        return cls(TaskStatsStore(tasks, entries, column=pool.label_column, group_size=group_size), start=start)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(record)`` after each record a flush applies (e.g. ``SamplerSet.observe``)."""
        self._listeners.append(listener)

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - the statistics must never stop training
            self.stopped = True
            self._held.clear()
            self._warnings.append(
                f"per-task statistics stopped for this start: {what} raised {type(exc).__name__}: {exc}"
            )

    # -- draws, settles, fates
    def draw(
        self,
        start: int,
        seq: int,
        task_id: str,
        position: int | None,
        *,
        version: int,
        sampler: str,
        reason: str,
        score: float | None = None,
    ) -> None:
        """A draw was bound: mark it outstanding and emit its ``draw`` event."""
        if not self.stopped and self._store.is_outstanding((start, seq)):
            raise ValueError(f"draw ({start}, {seq}) is already outstanding")
        self._bump_seq(start, seq)
        self._emit_draw(start, seq, task_id, position, version, sampler, reason, score)
        if not self.stopped:
            with self._guard("draw"):
                self._store.draw(start, seq, task_id, position)

    def _bump_seq(self, start: int, seq: int) -> None:
        if start == self.start:
            self.next_seq = max(self.next_seq, int(seq) + 1)

    def _emit_draw(
        self, start, seq, task_id, position, version, sampler, reason, score, reissues=None
    ) -> None:
        event: dict[str, Any] = {
            "event": "draw",
            "start": start,
            "seq": seq,
            "task_id": task_id,
            "position": position,
            "version": version,
            "sampler": sampler,
            "reason": reason,
        }
        if score is not None:
            event["score"] = score
        if reissues is not None:
            event["reissues"] = [reissues[0], reissues[1]]
        self._events.append(event)

    def settle(self, record: GroupRecord) -> None:
        """A group settled: hold its record until the next flush and emit its ``settle`` event."""
        threshold = self._store.threshold(
            record.entry
            if record.entry in self._store.entries
            else (self._store.task_entry(record.task_id) if record.task_id in self._store else None)
        )
        self._events.append(
            {
                "event": "settle",
                "start": record.start,
                "seq": record.seq,
                "task_id": record.task_id,
                "verdict": record.verdict,
                "valid": record.valid,
                "passes": record.passes(threshold),
                "version": record.oldest_version(),
            }
        )
        if not self.stopped:
            self._held.append(record)

    def fate(
        self,
        start: int,
        seq: int,
        fate: str,
        task_id: str | None = None,
        *,
        rule: str | None = None,
        admission: str | None = None,
    ) -> None:
        """Give a draw its fate now (no flush); ``rule``/``admission`` name an admission rule's decision."""
        if fate not in FATES:
            raise ValueError(f"unknown fate {fate!r}; one of {', '.join(FATES)}")
        event: dict[str, Any] = {"event": "fate", "start": start, "seq": seq, "fate": fate}
        if rule is not None:
            event["rule"] = rule
            event["admission"] = admission
        self._events.append(event)
        if not self.stopped:
            with self._guard("fate"):
                self._store.fate(start, seq, fate, task_id)

    def reissue(
        self,
        old_key: tuple[int, int],
        new_key: tuple[int, int],
        *,
        version: int | None = None,
        sampler: str | None = None,
        reason: str = "reissue",
        score: float | None = None,
    ) -> bool:
        """Move outstanding draw ``old_key`` to ``new_key`` (not a second draw); False, changing nothing, if it is
        not outstanding. With ``sampler`` given, also emit the new key's ``draw`` event with ``reissues``."""
        if self.stopped:
            return False
        drawn = self._store.outstanding_draw(old_key)
        ok = False
        with self._guard("reissue"):
            ok = self._store.reissue(old_key, new_key)
        if ok:
            self._bump_seq(*new_key)
            if sampler is not None and drawn is not None:
                self._emit_draw(
                    *new_key, drawn[0], drawn[1], version, sampler, reason, score, reissues=old_key
                )
        return ok

    def replace_outstanding(self, draws: list[tuple[int, int, str, int | None]]) -> None:
        """Make ``draws`` (``[(start, seq, task_id, position)]``) the outstanding draws (``TaskStatsStore.
        replace_outstanding``), so that a resume's reissues and fates find them; no event."""
        if self.stopped:
            return
        with self._guard("replace_outstanding"):
            self._store.replace_outstanding(draws)

    def lose_outstanding(self) -> list[tuple[int, int, str]]:
        """Give ``lost`` to every outstanding draw (with their fate events); returns ``[(start, seq, task_id)]``."""
        if self.stopped:
            return []
        lost: list[tuple[int, int, str]] = []
        with self._guard("lose_outstanding"):
            lost = self._store.lose_outstanding()
        for s, q, _ in lost:
            self._events.append({"event": "fate", "start": s, "seq": q, "fate": "lost"})
        return lost

    # -- flushing and reading
    def flush(self) -> None:
        """Apply the held records sorted by ``(start, seq)``, calling the listeners after each."""
        if not self._held or self.stopped:
            return
        held, self._held = sorted(self._held, key=lambda r: (r.start, r.seq)), []
        with self._guard("settle"):
            for record in held:
                self._store.settle(record)
                for listener in self._listeners:
                    try:
                        listener(record)
                    except Exception as exc:  # noqa: BLE001 - a listener's failure is its own
                        self._warnings.append(f"a statistics listener raised {type(exc).__name__}: {exc}")

    @property
    def held(self) -> int:
        """How many settled records wait for the next flush."""
        return len(self._held)

    @property
    def store(self) -> TaskStatsStore:
        """The store, after a flush."""
        self.flush()
        return self._store

    def peek_store(self) -> TaskStatsStore:
        """The store without a flush (admission rules read this)."""
        return self._store

    def view(self, version: int, live: bool = True) -> TaskStatsView:
        """A sampler's view at ``version`` (flushes first). Not live when the recorder stopped (the view reads what
        it held) or when ``live`` is False (the statistics never started: an empty store over the pool)."""
        if self.stopped:
            return TaskStatsView(self._store, version, live=False)
        if not live:
            if self._empty is None:
                self._empty = self._store.fresh()
            return TaskStatsView(self._empty, version, live=False)
        return TaskStatsView(self.store, version, live=True)

    # -- persistence
    def snapshot(self, *, columns: bool = False) -> dict[str, Any] | None:
        """The snapshot of 1.10 (flushes first); None once the recorder stopped. As JSON-safe data (format 1), or,
        with ``columns``, in format 2: the same with the tasks as numpy arrays under ``columns``
        (``TaskStatsStore.to_columns``), for a runs layer to write in a columnar file. Either loads back."""
        self.flush()
        if self.stopped:
            return None
        data: dict[str, Any] | None = None
        with self._guard("snapshot"):
            store = self._store.to_columns() if columns else self._store.to_json()
            data = {
                "format": COLUMNS_FORMAT if columns else SNAPSHOT_FORMAT,
                "start": self.start,
                "next_seq": self.next_seq,
                **store,
            }
        return data

    def load_snapshot(self, data: dict[str, Any]) -> None:
        """Load a snapshot of format 1 or 2: ValueError for another format or a malformed one. Tasks that left the
        pool are dropped, new tasks start empty, the outstanding draws are replaced wholesale; held records are
        dropped."""
        formats = (SNAPSHOT_FORMAT, COLUMNS_FORMAT)
        if not isinstance(data, dict) or data.get("format") not in formats:
            fmt = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"statistics snapshot format {fmt!r} is not one of {formats}")
        if data["format"] == COLUMNS_FORMAT and not isinstance(data.get("columns"), dict):
            raise ValueError("statistics snapshot of format 2 without its columns")
        self._store.load_json(data)
        self._held.clear()

    # -- outboxes
    def take_events(self) -> list[dict[str, Any]]:
        """The events since the last call, in the order they happened (for ``tasks/events.jsonl``)."""
        events, self._events = self._events, []
        return events

    def take_warnings(self) -> list[str]:
        warnings, self._warnings = self._warnings, []
        return warnings
