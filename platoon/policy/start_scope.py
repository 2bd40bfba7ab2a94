"""The start limit's metrics, per scope: how many rollouts were starting and waiting, over time, why slots came back,
and how long a slot was waited for (``rollout_client/start_limit/...``, docs/start-limit.md).

What this module owns: `ScopeWindow`, the counters of one scope (``"train"`` or ``"eval"``) since the last read, its
time-weighted levels, its read-out (`ScopeWindow.read`) and its saved form; `StartLimit` (``start_limit``) moves the
levels, this module only integrates and reports them.

Rules it keeps:
- levels are integrated over time (``advance`` at each change); a window with no length reports the level at
  ``now``; a read starts a new window at ``now``;
- the four release counts are always reported; the wait percentiles (linear interpolation between order
  statistics, numpy's default) only when a slot was taken in the window;
- the saved form is a JSON-safe list in a fixed order (keys as lists), and loads to an equal window.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

RELEASE_REASONS = ("first_call", "end", "timer", "cancelled")
"""Why a slot came back; every one is always logged (``rollout_client/start_limit/releases/<reason>``)."""
PREFIX = "rollout_client/start_limit/"


@dataclass
class ScopeWindow:
    """Per-scope counters since the last metrics read."""

    asked: bool = False
    starting: int = 0
    waiting: int = 0
    window_start: float | None = None
    last_t: float | None = None
    starting_area: float = 0.0
    waiting_area: float = 0.0
    releases: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RELEASE_REASONS, 0))
    waits: list[tuple[Hashable, float]] = field(default_factory=list)

    def advance(self, now: float) -> None:
        """Integrate the levels up to ``now`` (the window begins at the first call)."""
        if self.last_t is not None:
            dt = now - self.last_t
            self.starting_area += self.starting * dt
            self.waiting_area += self.waiting * dt
        if self.window_start is None:
            self.window_start = now
        self.last_t = now

    def read(self, now: float) -> dict[str, float]:
        """The window's metrics up to ``now`` (see the module doc), then a new window from ``now``."""
        self.advance(now)
        span = now - self.window_start if self.window_start is not None else 0.0
        if span > 0:
            out = {
                PREFIX + "starting_mean": self.starting_area / span,
                PREFIX + "waiting_mean": self.waiting_area / span,
            }
        else:
            out = {PREFIX + "starting_mean": float(self.starting), PREFIX + "waiting_mean": float(self.waiting)}
        for reason in RELEASE_REASONS:
            out[PREFIX + "releases/" + reason] = float(self.releases[reason])
        if self.waits:
            waits = sorted(w for _, w in self.waits)
            out[PREFIX + "wait_seconds_p50"] = percentile(waits, 0.5)
            out[PREFIX + "wait_seconds_p90"] = percentile(waits, 0.9)
            out[PREFIX + "wait_seconds_max"] = waits[-1]
        self.window_start = now
        self.starting_area = self.waiting_area = 0.0
        self.releases = dict.fromkeys(RELEASE_REASONS, 0)
        self.waits = []
        return out

    def saved(self) -> list[Any]:
        """The JSON-safe saved form (a key must be a tuple of JSON-safe values)."""
        return [self.asked, self.starting, self.waiting, self.window_start, self.last_t, self.starting_area,
                self.waiting_area, dict(self.releases), [[list(k), w] for k, w in self.waits]]

    @classmethod
    def from_saved(cls, saved: list[Any]) -> ScopeWindow:
        """The window whose `saved` form is ``saved`` (keys come back as tuples)."""
        asked, starting, waiting, ws, last, sa, wa, releases, waits = saved
        return cls(asked, starting, waiting, ws, last, sa, wa, dict(releases), [(tuple(k), w) for k, w in waits])


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values`` by linear interpolation between order statistics (numpy's default)."""
    pos = (len(values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)
