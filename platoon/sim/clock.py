"""The simulator's clock: timer records on a SimPy environment, each fired at its own time.

What this module owns: **every pending event is a timer record** ``(seq, time, kind, payload)`` in a registry, each
scheduled on SimPy as a ``Timeout`` whose callback fires it; a cancelled timer is dropped from the registry and its
timeout does nothing. Handlers (one per ``Timer`` kind, registered by the parts of the runtime that own them) read
the timer's own time (``now``), never SimPy's clock, so a checkpoint of the registry pushed back in ``seq`` order
replays the uninterrupted run event for event, even where ``time - now + now`` rounds. After each handler the
``after`` hook runs (the runtime re-arms the driver's deadline there).
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from platoon.sim.records import Timer

Handler = Callable[..., None]


class TimerClock:
    """The registry of timers on one SimPy environment that starts at ``now``."""

    def __init__(self, *, now: float = 0.0) -> None:
        self.env = simpy.Environment(initial_time=now)
        self.now = now
        self.seq = 0
        self.timers: dict[int, tuple[float, Timer, tuple]] = {}
        self.handlers: dict[Timer, Handler] = {}
        self.after: Callable[[], None] = lambda: None

    def on(self, kind: Timer, handler: Handler) -> None:
        """Fire ``handler(*payload)`` for timers of ``kind``."""
        self.handlers[kind] = handler

    def at(self, t: float, kind: Timer, payload: tuple = ()) -> int:
        """A new timer at time ``t``; its seq (to cancel it)."""
        self.seq += 1
        self._schedule(self.seq, t, kind, payload)
        return self.seq

    def cancel(self, seq: int | None) -> None:
        if seq is not None:
            self.timers.pop(seq, None)

    def pending(self, seq: int) -> bool:
        return seq in self.timers

    def _schedule(self, seq: int, t: float, kind: Timer, payload: tuple) -> None:
        self.timers[seq] = (t, kind, payload)
        delay = t - self.env.now
        # the timeout carries its seq as its value: one bound callback for all, no closure a timer
        self.env.timeout(delay if delay > 0.0 else 0.0, seq).callbacks.append(self._fire)

    def _fire(self, ev: simpy.Timeout) -> None:
        """The timeout of timer ``ev.value`` came: its handler runs at the timer's own time (nothing if cancelled)."""
        entry = self.timers.pop(ev.value, None)
        if entry is None:
            return
        t, kind, payload = entry
        if t > self.now:
            self.now = t
        self.handlers[kind](*payload)
        self.after()

    def run(self, until: simpy.Event | float) -> None:
        """Run SimPy until ``until``; RuntimeError (SimPy's) when no event is left before it."""
        self.env.run(until=until)

    def state_dict(self) -> dict:
        return {"seq": self.seq, "timers": [[s, t, k.value, list(p)] for s, (t, k, p) in sorted(self.timers.items())]}

    def load_state_dict(self, state: dict) -> None:
        """Push the checkpoint's timers back, in seq order."""
        self.seq = state["seq"]
        for seq, t, kind, payload in state["timers"]:
            self._schedule(seq, t, Timer(kind), tuple(payload))


__all__ = ["TimerClock"]
