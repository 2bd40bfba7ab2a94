"""Turns mode under ``train.inference.engine: vllm``: the engine's servers, as the live ``VLLMService`` uses them.

A deployment of N servers (``train.inference``: its URLs or ``launch.servers``), each batching continuously as vLLM
does: with n requests running at a server, each progresses at ``1 / (base_s + per_sequence_s x n)`` of a request a
second (a request alone takes ``base_s + per_sequence_s``; n that arrive together all end ``base_s +
per_sequence_s x n`` later); at most ``max_batch`` run, the rest wait in arrival order. Since every running request
progresses at the same rate, a server keeps one virtual clock (work done per request since its start) and a request
ends when the clock has gone one unit past its arrival: requests end in the order they started running, so the next
end is always the oldest's, one timer per server.

Routing is the live ``Router``'s: a rollout's calls keep the server of its first (its prefix cache), a new rollout's
first call goes to the server with the fewest requests in flight (then the fewest so far, then the lowest index).

A weight update (``pause`` at the start of the publish's last ``pause_s``, ``resume`` at its end) stops every server's
clock. Under ``in_flight: abort`` the requests running then are aborted and re-sent on the new weights: at the resume
they start over (``inference/resent`` counts them); under ``keep`` they go on where they stood. Requests made during
the pause wait for the resume, as the live service holds them.

Each answer tells the rollout its server and the requests in flight there on average while it ran (``concurrency``,
the time-average the live service measures too): the ``model_call`` span's arguments, from which ``platoon
calibrate`` fits ``base_s`` and ``per_sequence_s``. State is plain data, for exact resume (``state_dict``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from platoon.config.sim import SimServiceConfig
from platoon.sim.clock import TimerClock
from platoon.sim.records import Timer

Key = tuple[int, int, int]
Answered = Callable[[Key, int, float], None]


@dataclass
class Server:
    """One continuously batching server (see the module docstring): ``running`` maps a request to the virtual time
    it ends at, in the order they end; ``marks`` each request's (load integral, time) at its arrival."""

    running: dict[Key, float] = field(default_factory=dict)
    waiting: dict[Key, None] = field(default_factory=dict)
    marks: dict[Key, tuple[float, float]] = field(default_factory=dict)
    virtual: float = 0.0
    since: float = 0.0
    load_area: float = 0.0  # the integral of requests in flight over time
    requests: int = 0
    timer: int | None = None

    @property
    def in_flight(self) -> int:
        return len(self.running) + len(self.waiting)

    def to_json(self) -> dict:
        return {"running": [[*k, v] for k, v in self.running.items()], "waiting": [list(k) for k in self.waiting],
                "marks": [[*k, a, t] for k, (a, t) in self.marks.items()], "virtual": self.virtual,
                "since": self.since, "load_area": self.load_area, "requests": self.requests, "timer": self.timer}

    @classmethod
    def from_json(cls, d: dict) -> Server:
        return cls({(s, q, i): v for s, q, i, v in d["running"]}, {(s, q, i): None for s, q, i in d["waiting"]},
                   {(s, q, i): (a, t) for s, q, i, a, t in d["marks"]}, d["virtual"], d["since"], d["load_area"],
                   int(d["requests"]), d["timer"])


class Deployment:
    """The engine's servers and the router over them (see the module docstring). ``answered(key, server,
    concurrency)`` hears of each answer; ``changed()`` of each change to the servers' load (the trainer's share)."""

    def __init__(self, cfg: SimServiceConfig, *, servers: int, in_flight: str, clock: TimerClock,
                 answered: Answered, changed: Callable[[], None]) -> None:
        self.base_s, self.per_sequence_s, self.max_batch = cfg.base_s, cfg.per_sequence_s, cfg.max_batch
        self.abort = in_flight == "abort"
        self.clock, self.answered, self.changed = clock, answered, changed
        self.servers = [Server(since=clock.now) for _ in range(servers)]
        self.home: dict[Key, int] = {}  # a rollout's server, from its first call to its end
        self.paused_at: float | None = None
        self.aborted = False  # the pause under way aborted the requests running then
        self.counts = {"requests": 0, "resent": 0}
        self.paused_s, self.metrics_since, self.syncs = 0.0, clock.now, []
        clock.on(Timer.SERVER_DONE, self._t_done)

    @property
    def busy(self) -> bool:
        """Whether a server is working now (requests running, no pause)."""
        return self.paused_at is None and any(s.running for s in self.servers)

    # --- requests -------------------------------------------------------------------------------------------
    def request(self, key: Key) -> None:
        """Member ``key``'s next model call, at its rollout's server (the least loaded for its first)."""
        index = self.home.get(key)
        if index is None:
            index = min(range(len(self.servers)), key=lambda i: (self.servers[i].in_flight, self.servers[i].requests))
            self.home[key] = index
        s = self.servers[index]
        self._advance(s)
        s.requests += 1
        self.counts["requests"] += 1
        s.marks[key] = (s.load_area, self.clock.now)
        if len(s.running) < self.max_batch:
            s.running[key] = s.virtual + 1.0
        else:
            s.waiting[key] = None
        self._arm(index)

    def withdraw(self, key: Key) -> None:
        """Member ``key``'s call is no longer wanted (its rollout cancelled or out of time)."""
        index = self.home.get(key)
        if index is None:
            return
        s = self.servers[index]
        if key not in s.marks:
            return
        self._advance(s)
        s.running.pop(key, None)
        s.waiting.pop(key, None)
        del s.marks[key]
        self._admit(s)
        self._arm(index)

    def forget(self, key: Key) -> None:
        """Member ``key``'s rollout is over: its next rollout is routed afresh."""
        self.home.pop(key, None)

    def _t_done(self, index: int) -> None:
        s = self.servers[index]
        s.timer = None
        self._advance(s)
        key, ends = next(iter(s.running.items()))
        del s.running[key]
        s.virtual = max(s.virtual, ends)
        area, began = s.marks.pop(key)
        seconds = self.clock.now - began
        concurrency = (s.load_area - area) / seconds if seconds > 0 else float(s.in_flight + 1)
        self._admit(s)
        self._arm(index)
        self.answered(key, index, concurrency)

    # --- weight updates -------------------------------------------------------------------------------------
    def pause(self) -> None:
        """Every server stops for a weight update; under ``abort`` the requests running now will start over."""
        for s in self.servers:
            self._advance(s)
            self.clock.cancel(s.timer)
            s.timer = None
            if self.abort:
                self.counts["resent"] += len(s.running)
        self.paused_at, self.aborted = self.clock.now, self.abort
        self.changed()

    def resume(self, publish_s: float) -> None:
        """The update is done (the whole publish took ``publish_s``): the servers go on."""
        now = self.clock.now
        for s in self.servers:
            self._advance(s)  # up to now, paused
        if self.paused_at is not None:
            self.paused_s += now - self.paused_at
        self.paused_at = None
        self.syncs.append(publish_s)
        for index, s in enumerate(self.servers):
            if self.aborted:
                s.running = dict.fromkeys(s.running, s.virtual + 1.0)
            self._arm(index)
        self.aborted = False

    # --- the clocks -----------------------------------------------------------------------------------------
    def _cost(self, n: int) -> float:
        return self.base_s + self.per_sequence_s * n

    def _advance(self, s: Server) -> None:
        now = self.clock.now
        elapsed = now - s.since
        if elapsed > 0:
            s.load_area += elapsed * s.in_flight
            cost = self._cost(len(s.running))
            if s.running and self.paused_at is None and cost > 0:
                s.virtual += elapsed / cost
        s.since = now

    def _admit(self, s: Server) -> None:
        while s.waiting and len(s.running) < self.max_batch:
            key = next(iter(s.waiting))
            del s.waiting[key]
            s.running[key] = s.virtual + 1.0

    def _arm(self, index: int) -> None:
        """Re-arm server ``index``'s timer at its oldest running request's end (none while paused or idle)."""
        s = self.servers[index]
        self.clock.cancel(s.timer)
        s.timer = None
        if s.running and self.paused_at is None:
            ends = next(iter(s.running.values()))
            at = s.since + max(0.0, ends - s.virtual) * self._cost(len(s.running))
            s.timer = self.clock.at(at, Timer.SERVER_DONE, (index,))
        self.changed()

    # --- metrics and state ----------------------------------------------------------------------------------
    def take_metrics(self) -> dict[str, float]:
        """``inference/...`` since the last call, as the live service reports them."""
        now = self.clock.now
        paused = self.paused_s + (now - self.paused_at if self.paused_at is not None else 0.0)
        out = {f"inference/{k}": float(v) for k, v in self.counts.items()}
        out["inference/retries"] = 0.0
        out["inference/servers_up"] = float(len(self.servers))
        if self.syncs:
            out["inference/weight_sync_s"] = sum(self.syncs) / len(self.syncs)
        out["inference/paused_share"] = min(1.0, paused / max(now - self.metrics_since, 1e-9))
        self.counts = dict.fromkeys(self.counts, 0)
        self.paused_s, self.syncs, self.metrics_since = 0.0, [], now
        if self.paused_at is not None:  # the pause under way counts in the next step from here
            self.paused_at = now
        return out

    def state_dict(self) -> dict:
        return {"servers": [s.to_json() for s in self.servers], "home": [[*k, v] for k, v in self.home.items()],
                "paused_at": self.paused_at, "aborted": self.aborted, "counts": dict(self.counts),
                "paused_s": self.paused_s, "metrics_since": self.metrics_since, "syncs": list(self.syncs)}

    def load_state_dict(self, state: dict) -> None:
        self.servers = [Server.from_json(d) for d in state["servers"]]
        self.home = {(s, q, i): v for s, q, i, v in state["home"]}
        self.paused_at, self.aborted = state["paused_at"], bool(state["aborted"])
        self.counts = {k: int(v) for k, v in state["counts"].items()}
        self.paused_s, self.metrics_since = state["paused_s"], state["metrics_since"]
        self.syncs = list(state["syncs"])


__all__ = ["Deployment", "Server"]
