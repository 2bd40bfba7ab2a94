"""Time-weighted gauges for step metrics (permits held, rollouts in flight, blocked time).

A gauge integrates its value over time; `read(now=)` returns the mean since the last read and starts a new
window. Time never goes backwards: an earlier `now` is an error.
"""

from __future__ import annotations


class TimeWeighted:
    """The time-weighted mean and the maximum of a piecewise-constant value, per read window."""

    __slots__ = ("value", "_since", "_window_start", "_area", "_max")

    def __init__(self, value: float = 0.0, *, now: float = 0.0) -> None:
        self.value = value
        self._since = now
        self._window_start = now
        self._area = 0.0
        self._max = value

    def _advance(self, now: float) -> None:
        if now < self._since:
            raise ValueError(f"time went backwards: {now} < {self._since}")
        self._area += self.value * (now - self._since)
        self._since = now

    def set(self, value: float, *, now: float) -> None:
        # `_advance` and `max` inlined: a gauge is set several times a rollout (the same arithmetic, in order)
        since = self._since
        if now < since:
            raise ValueError(f"time went backwards: {now} < {since}")
        self._area += self.value * (now - since)
        self._since = now
        self.value = value
        if value > self._max:
            self._max = value

    def add(self, delta: float, *, now: float) -> None:
        self.set(self.value + delta, now=now)

    def read(self, *, now: float) -> tuple[float, float]:
        """(mean, max) over the window since the last read; the current value when the window is empty."""
        self._advance(now)
        span = now - self._window_start
        mean = self._area / span if span > 0 else self.value
        peak = self._max
        self._window_start, self._area, self._max = now, 0.0, self.value
        return mean, peak

    def state_dict(self) -> list[float]:
        return [self.value, self._since, self._window_start, self._area, self._max]

    @classmethod
    def from_state(cls, state: list[float]) -> TimeWeighted:
        gauge = cls()
        gauge.value, gauge._since, gauge._window_start, gauge._area, gauge._max = (float(x) for x in state)
        return gauge


class BlockedClock:
    """How long the dispatcher was held back, by reason, per read window (wait in progress counted up to now)."""

    REASONS = ("permits", "horizon", "labels", "plan", "sampler")

    def __init__(self, *, now: float = 0.0) -> None:
        self.reason: str | None = None
        self._since = now
        self._window_start = now
        self._totals = dict.fromkeys(self.REASONS, 0.0)

    def set(self, reason: str | None, *, now: float) -> None:
        if reason is not None and reason not in self._totals:
            raise ValueError(f"unknown blocking reason {reason!r}")
        if now < self._since:
            raise ValueError(f"time went backwards: {now} < {self._since}")
        if self.reason is not None:
            self._totals[self.reason] += now - self._since
        self.reason, self._since = reason, now

    def read(self, *, now: float) -> dict[str, float]:
        """Share of the window spent held back, per reason, capped at 1.0."""
        self.set(self.reason, now=now)
        span = now - self._window_start
        shares = {r: (min(1.0, t / span) if span > 0 else 0.0) for r, t in self._totals.items()}
        self._window_start = now
        self._totals = dict.fromkeys(self.REASONS, 0.0)
        return shares

    def state_dict(self) -> dict:
        return {"reason": self.reason, "since": self._since, "window_start": self._window_start,
                "totals": dict(self._totals)}

    @classmethod
    def from_state(cls, state: dict) -> BlockedClock:
        clock = cls()
        clock.reason, clock._since = state["reason"], float(state["since"])
        clock._window_start = float(state["window_start"])
        clock._totals = {r: float(state["totals"][r]) for r in cls.REASONS}
        return clock
