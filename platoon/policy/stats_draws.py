"""The store's ledger of outstanding draws: each draw from its draw to its fate.

What this module owns: ``StoreDraws``, the part of `TaskStatsStore` (``platoon.policy.stats``) that keys each draw
``(start, seq)`` to its ``(task_id, position)`` while no committed step has consumed it, and keeps the task's
``drawn`` and ``outstanding`` counts and its fates with it.

Rules it keeps:
- a key is outstanding at most once: drawing (or reissuing to) a key that is outstanding is a ValueError;
- ``fate`` ends a draw: ``outstanding`` -= 1 (never below 0), ``fates[fate]`` += 1; an unknown fate is a ValueError;
- ``reissue`` moves a draw to a new key and changes no count;
- ``outstanding_draws`` and ``lose_outstanding`` go in draw order (by key), never in dict order.
"""

from __future__ import annotations

from collections.abc import Sequence

from platoon.policy.records import FATES


class StoreDraws:
    """The draw ledger of `TaskStatsStore` (a base class of it, on its fields ``_outstanding``, ``_index``,
    ``_drawn``, ``_outstanding_n``, ``_busy`` and ``_counts``, and its ``_record`` and ``_changed``)."""

    def draw(self, start: int, seq: int, task_id: str, position: int | None = None) -> None:
        """Mark draw ``(start, seq)`` outstanding; a key already outstanding is a ValueError."""
        key = (int(start), int(seq))
        if key in self._outstanding:
            raise ValueError(f"draw {key} is already outstanding")
        self._outstanding[key] = (task_id, position)
        i = self._index.get(task_id)
        if i is not None:
            self._record(i)
            self._drawn[i] += 1
            self._outstanding_n[i] += 1
            self._busy.add(i)
            self._changed(i)

    def fate(self, start: int, seq: int, fate: str, task_id: str | None = None) -> str | None:
        """Give draw ``(start, seq)`` its fate; returns the task it names (``task_id`` if it was not outstanding)."""
        if fate not in FATES:
            raise ValueError(f"unknown fate {fate!r}; one of {', '.join(FATES)}")
        drawn = self._outstanding.pop((int(start), int(seq)), None)
        if drawn is not None:
            task_id = drawn[0]
            i = self._index.get(task_id)
            if i is not None and self._outstanding_n[i] > 0:
                self._outstanding_n[i] -= 1
                self._changed(i)
                if self._outstanding_n[i] == 0:
                    self._busy.discard(i)
        i = self._index.get(task_id) if task_id is not None else None
        if i is not None:
            self._record(i).fates[fate] += 1
        return task_id

    def reissue(self, old_key: tuple[int, int], new_key: tuple[int, int]) -> bool:
        """Move an outstanding draw to ``new_key`` (neither ``drawn`` nor a fate changes); False if not outstanding."""
        old, new = (int(old_key[0]), int(old_key[1])), (int(new_key[0]), int(new_key[1]))
        if old not in self._outstanding:
            return False
        if new in self._outstanding:
            raise ValueError(f"draw {new} is already outstanding")
        self._outstanding[new] = self._outstanding.pop(old)
        return True

    def is_outstanding(self, key: tuple[int, int]) -> bool:
        return (int(key[0]), int(key[1])) in self._outstanding

    def outstanding_draw(self, key: tuple[int, int]) -> tuple[str, int | None] | None:
        """``(task_id, position)`` of an outstanding draw, or None."""
        return self._outstanding.get((int(key[0]), int(key[1])))

    def outstanding_draws(self) -> list[tuple[int, int, str, int | None]]:
        """``[(start, seq, task_id, position), ...]`` in draw order."""
        return [(s, q, t, p) for (s, q), (t, p) in sorted(self._outstanding.items())]

    def replace_outstanding(self, draws: Sequence[tuple[int, int, str, int | None]]) -> None:
        """Make ``draws`` (``[(start, seq, task_id, position), ...]``) the outstanding draws, wholesale, with each
        task's outstanding count; nothing else changes. For a resume whose statistics are not its checkpoint's own
        (an older snapshot, or none): the checkpoint's dispatch state says what is outstanding."""
        self._outstanding = {}
        self._outstanding_n[:] = 0
        self._busy = set()
        self._counts.clear()
        for s, q, task_id, position in draws:
            key = (int(s), int(q))
            if key in self._outstanding:
                raise ValueError(f"draw {key} is outstanding twice")
            self._outstanding[key] = (str(task_id), None if position is None else int(position))
            i = self._index.get(task_id)
            if i is not None:
                self._record(i)
                self._outstanding_n[i] += 1
                self._busy.add(i)

    def lose_outstanding(self) -> list[tuple[int, int, str]]:
        """Give ``lost`` to every outstanding draw, in draw order; returns ``[(start, seq, task_id), ...]``."""
        lost = []
        for s, q, t, _ in self.outstanding_draws():
            self.fate(s, q, "lost")
            lost.append((s, q, t))
        return lost
