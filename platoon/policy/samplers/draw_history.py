"""`DrawHistory`: when each of a ``pass_rate`` sampler's tasks was drawn, by decision and by window.

What it owns: over the sampler's ``N`` distinct task ids, each one's last drawing decision (never drawn: -1), the
draws of the current window (decisions ``d`` with ``d // N`` equal) and of the previous one, the tasks at the window
cap (``max_draws_per_epoch``), the two exploration orders (least recently drawn; not yet drawn in this window) and
the saved form of all that (the four keys of platoon 0.4.0's ``pass_rate`` state).

Rules it keeps:
- the previous window's draws survive only into the next window; a jump of more than one window clears both;
- a drawn task's last decision is unique, so ties in "least recently drawn" happen only among never-drawn tasks,
  broken by the decision's generator;
- loading validates the whole state before anything changes (``parsed`` is pure; ``assign`` sets): a bad state
  raises ValueError and leaves the history as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

_NEVER = np.iinfo(np.int64).max
STATE_KEYS = ("last_drawn", "window", "window_draws", "previous_window_draws")
"""The keys of the saved history, platoon 0.4.0's ``pass_rate`` state."""


class DrawHistory:
    """The draw history of ``n`` tasks under a window cap of ``cap`` draws (None: no cap); see the module doc."""

    __slots__ = ("n", "cap", "last", "window", "window_draws", "previous", "never", "n_never", "capped")

    def __init__(self, n: int, cap: int | None) -> None:
        self.n, self.cap = n, cap
        self.assign(np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), 0)

    def roll(self, decision: int) -> None:
        """Move to decision ``decision``'s window (``decision // n``)."""
        window = decision // self.n
        if window == self.window:
            return
        if window == self.window + 1:
            self.previous, self.window_draws = self.window_draws, self.previous
        else:
            self.previous[:] = 0
        self.window_draws[:] = 0
        self.capped = []
        self.window = window

    def drawn(self, i: int, decision: int) -> None:
        """Task ``i`` was drawn at ``decision``."""
        if self.last[i] < 0:
            self.never[i] = False
            self.n_never -= 1
        self.last[i] = decision
        self.window_draws[i] += 1
        if self.cap is not None and self.window_draws[i] == self.cap:
            self.capped.append(i)

    def least_recent(self, keep: np.ndarray, rng: np.random.Generator) -> int:
        """The kept task drawn least recently (never drawn: -1), ties at random."""
        if self.n_never:
            batch = rng.integers(self.n, size=64)
            hits = batch[keep[batch] & self.never[batch]]
            if hits.size:  # rejection sampling: uniform over the kept never-drawn tasks
                return int(hits[0])
            fresh = np.flatnonzero(keep & self.never)
            if fresh.size:
                return int(fresh[0] if fresh.size == 1 else fresh[rng.integers(fresh.size)])
        return int(np.argmin(np.where(keep, self.last, _NEVER)))

    def not_yet_in_window(self, keep: np.ndarray, rng: np.random.Generator) -> int:
        """A kept task not drawn in this window, uniformly at random; -1 when every kept task has been."""
        fresh = keep & (self.window_draws == 0)
        batch = rng.integers(self.n, size=64)
        hits = batch[fresh[batch]]
        if hits.size:  # rejection sampling first: O(1) while most of the window is still to draw
            return int(hits[0])
        left = np.flatnonzero(fresh)
        return int(left[rng.integers(left.size)]) if left.size else -1

    def recent_share(self, i: int) -> tuple[int, int]:
        """``(draws of task i, draws of all)`` over this window and the previous one, task i's at least 1."""
        total = int(self.window_draws.sum() + self.previous.sum())
        return max(int(self.window_draws[i] + self.previous[i]), 1), total

    def top_share(self, k: int) -> float | None:
        """The ``k`` largest draw counts over the total, on the current window, or on the previous one while the
        current holds fewer than ``n / 2`` draws; None without draws."""
        draws = self.window_draws
        if draws.sum() < self.n / 2 and self.previous.any():
            draws = self.previous
        total = int(draws.sum())
        if total <= 0:
            return None
        return float(np.partition(draws, self.n - k)[self.n - k :].sum()) / total

    # -- state
    def state(self, ids: tuple[str, ...]) -> dict[str, Any]:
        """The history by task id, 0.4.0's keys (each map holds only what is not its default)."""

        def as_map(arr: np.ndarray, present: np.ndarray) -> dict[str, int]:
            return {ids[i]: int(arr[i]) for i in np.flatnonzero(present).tolist()}

        return {
            "last_drawn": as_map(self.last, self.last >= 0),
            "window": int(self.window),
            "window_draws": as_map(self.window_draws, self.window_draws > 0),
            "previous_window_draws": as_map(self.previous, self.previous > 0),
        }

    def parsed(self, state: Mapping[str, Any], index: Mapping[str, int]) -> tuple[np.ndarray, ...]:
        """``(last, window draws, previous window draws, window)`` read from a saved ``state`` (``index``: task id
        to position; tasks that left are dropped, new ones never drawn), changing nothing. ValueError for a missing
        key, a window that is not an int >= 0, or maps that are not {str: int >= 0}."""
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"pass_rate state lacks {missing}")
        window = state["window"]
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"pass_rate state: window is an int >= 0, got {window!r}")
        arrays = []
        for key, fill in (("last_drawn", -1), ("window_draws", 0), ("previous_window_draws", 0)):
            m = state[key]
            if not isinstance(m, Mapping):
                raise ValueError(f"pass_rate state: {key} is a mapping, got {type(m).__name__}")
            arr = np.full(self.n, fill, dtype=np.int64)
            for t, v in m.items():
                if not isinstance(t, str) or isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"pass_rate state: {key} maps task ids to ints >= 0, got {t!r}: {v!r}")
                i = index.get(t)
                if i is not None:
                    arr[i] = v
            arrays.append(arr)
        return (*arrays, window)

    def assign(self, last: np.ndarray, window_draws: np.ndarray, previous: np.ndarray, window: int) -> None:
        """Take these arrays as the history, and rebuild what follows: the never-drawn tasks, those at the cap."""
        self.last, self.window_draws, self.previous, self.window = last, window_draws, previous, int(window)
        self.never = self.last < 0
        self.n_never = int(np.count_nonzero(self.never))
        self.capped: list[int] = [] if self.cap is None else np.flatnonzero(self.window_draws >= self.cap).tolist()

    def reset(self) -> None:
        """Start afresh: nothing drawn, window 0."""
        n = self.n
        self.assign(np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), 0)
