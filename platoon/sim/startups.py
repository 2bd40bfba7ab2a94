"""Start-ups that contend for a shared capacity: a processor-sharing server in virtual time.

A rollout's start-up (worker, sandbox, toolchain, up to its first model call) is an amount of *work*: the seconds it
takes when it runs alone. With ``n`` start-ups running at once and a capacity ``c``, each progresses at rate
``min(1, c / n)``: up to ``c`` at once nobody slows down; beyond, they share ``c`` (a shared filesystem extracting
root filesystems, a sandbox service). With ``capacity`` None every start-up runs at rate 1.

The server keeps a virtual clock ``V`` that advances at the common rate, ``dV/dt = min(1, c / n)``; a start-up that
arrives at ``V0`` with work ``w`` finishes when ``V = V0 + w``. Arrivals, departures and cancellations are
``O(log n)`` (a heap of finish marks, cancelled marks skipped lazily), and the server says when its next start-up
finishes, which the runtime arms as one timer. State is plain data, for exact resume.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable

EPS = 1e-9


class StartupServer:
    """See the module docstring. Jobs are named by hashable keys (the runtime uses ``(start, seq, index)``)."""

    def __init__(self, capacity: float | None) -> None:
        self.capacity = capacity
        self.v = 0.0  # virtual work done by each running job since the server began
        self.t = 0.0  # real time of the last update
        self.heap: list[tuple[float, int, tuple]] = []  # (finish mark, arrival number, key)
        self.live: dict[tuple, float] = {}  # key -> finish mark
        self.arrivals = 0

    @property
    def running(self) -> int:
        return len(self.live)

    def rate(self) -> float:
        n = len(self.live)
        if self.capacity is None or n <= self.capacity:
            return 1.0
        return self.capacity / n

    def _advance(self, now: float) -> None:
        if now < self.t:
            raise ValueError(f"time went backwards: {now} < {self.t}")
        if self.live:
            self.v += self.rate() * (now - self.t)
        self.t = now

    def add(self, key: Hashable, work_s: float, *, now: float) -> None:
        """A start-up of ``work_s`` seconds' work begins at ``now``."""
        self._advance(now)
        key = tuple(key)  # type: ignore[arg-type]
        mark = self.v + max(0.0, float(work_s))
        self.arrivals += 1
        heapq.heappush(self.heap, (mark, self.arrivals, key))
        self.live[key] = mark

    def cancel(self, key: Hashable, *, now: float) -> bool:
        """The start-up ``key`` was cancelled; False when it is not running."""
        self._advance(now)
        return self.live.pop(tuple(key), None) is not None  # type: ignore[arg-type]

    def _head(self) -> tuple[float, int, tuple] | None:
        while self.heap and self.live.get(self.heap[0][2]) != self.heap[0][0]:
            heapq.heappop(self.heap)
        return self.heap[0] if self.heap else None

    def next_finish(self) -> float | None:
        """When the next running start-up finishes, at the current rate (None: none runs)."""
        head = self._head()
        if head is None:
            return None
        return self.t + max(0.0, head[0] - self.v) / self.rate()

    def pop_finished(self, *, now: float) -> list[tuple]:
        """The start-ups done by ``now``, in the order of their finish marks (ties: arrival order).

        Called when the timer armed at ``next_finish()`` fires: the head is done then, whatever the rounding of the
        virtual clock says (it is moved to the head's mark), and so is every start-up within a rounding of it."""
        self._advance(now)
        done = []
        head = self._head()
        if head is not None:
            self.v = max(self.v, head[0])
        while True:
            head = self._head()
            if head is None or head[0] > self.v + EPS * max(1.0, abs(self.v)):
                break
            heapq.heappop(self.heap)
            del self.live[head[2]]
            done.append(head[2])
        return done

    def state_dict(self) -> dict:
        return {"v": self.v, "t": self.t, "arrivals": self.arrivals,
                "jobs": [[m, n, list(k)] for m, n, k in sorted(self.heap) if self.live.get(k) == m]}

    def load_state_dict(self, state: dict) -> None:
        self.v, self.t, self.arrivals = float(state["v"]), float(state["t"]), int(state["arrivals"])
        self.heap = [(float(m), int(n), tuple(k)) for m, n, k in state["jobs"]]
        heapq.heapify(self.heap)
        self.live = {k: m for m, _, k in self.heap}


__all__ = ["StartupServer"]
