"""Turns mode (``sim.rollout.turns``): the batching model service, one queue and one batch at a time, and the
rollouts' turns, a part of ``SimRuntime`` (``platoon.sim.runtime``) split off for size.

A rollout's model call is a request ``key`` (the runtime uses ``(start, seq, index)``). Whenever the service is idle
and requests are queued, :meth:`ModelService.start` takes up to ``max_batch`` of them, oldest first, as one batch that
ends ``base_s + per_sequence_s x n`` later (the runtime arms one timer there); at that time the runtime takes the
answers in the batch's order (:meth:`next_answer`), each rollout going on with its environment step or its next
call, and then :meth:`finish` makes the service idle, so that a call made at that instant (a zero environment step)
joins the next batch; with ``handoff_s`` the service stays busy that much longer after each batch (handing the
answers back and taking the next batch in: a live service's own time between batches), so that the next batch
takes what is queued then. A request withdrawn (its rollout cancelled or out of time) leaves the queue, or the running
batch's answers; the batch's time was fixed when it started (its sequences were launched together).

State is plain data, for exact resume (``state_dict``): queue and batch in their order, the batch's start and size.

A rollout's turns (``TurnsMixin``): after its start-up it makes a call; when the call is answered it takes its
environment step (``MemberOutcome.env_steps``, a timer; none when it takes no time), and then its turn is done: it
raises (at ``error_turn``), ends (after ``turns``), or makes its next call. Its time limit (``timeout_s``) is a timer
of its own that stops the turn where it stands and ends the rollout, failing. Each call and step is a span of a traced
member (``model_call``, ``env_step``, by turn), each batch a span on the ``model service`` track. Whenever a batch
starts or ends, the trainer hears of it (``_service_changed``: a step in training under ``sim.trainer.
service_slowdown`` changes speed).
"""

from __future__ import annotations

from itertools import islice

from platoon.config.sim import SimServiceConfig
from platoon.runs.trace import SERVICE
from platoon.sim.records import SimGroup, Timer

Key = tuple[int, int, int]


class ModelService:
    """See the module docstring."""

    def __init__(self, cfg: SimServiceConfig) -> None:
        self.base_s, self.per_sequence_s, self.max_batch = cfg.base_s, cfg.per_sequence_s, cfg.max_batch
        self.handoff_s = cfg.handoff_s
        self.handing_off = False
        self.queue: dict[Key, None] = {}  # insertion order is arrival order: O(1) withdrawal, oldest first
        self.batch: dict[Key, None] = {}
        self.size = 0
        self.started: float | None = None  # the running batch's start; None: idle

    def request(self, key: Key) -> None:
        """A model call joins the queue."""
        self.queue[key] = None

    def withdraw(self, key: Key) -> None:
        """The call ``key`` is no longer wanted: it leaves the queue, or the running batch's answers."""
        if key in self.queue:
            del self.queue[key]
        else:
            self.batch.pop(key, None)

    def start(self, now: float) -> float | None:
        """Start a batch if the service is idle and requests wait; its end (None: none started)."""
        if self.started is not None or self.handing_off or not self.queue:
            return None
        keys = list(islice(self.queue, self.max_batch))
        for key in keys:
            del self.queue[key]
        self.batch, self.size, self.started = dict.fromkeys(keys), len(keys), now
        return now + self.base_s + self.per_sequence_s * len(keys)

    def next_answer(self) -> Key | None:
        """The next call the running batch answers (its order), taken off it; None when none is left."""
        if not self.batch:
            return None
        key = next(iter(self.batch))
        del self.batch[key]
        return key

    def finish(self) -> None:
        """The running batch's answers are all taken: the service is idle."""
        self.batch, self.size, self.started = {}, 0, None

    def state_dict(self) -> dict:
        return {"queue": [list(k) for k in self.queue], "batch": [list(k) for k in self.batch], "size": self.size,
                "started": self.started, "handing_off": self.handing_off}

    def load_state_dict(self, state: dict) -> None:
        self.queue = {(s, q, i): None for s, q, i in state["queue"]}
        self.batch = {(s, q, i): None for s, q, i in state["batch"]}
        self.size, self.started = int(state["size"]), state["started"]
        self.handing_off = bool(state.get("handing_off", False))


class TurnsMixin:
    """The runtime's turns mode (see the module docstring). Mixed into ``SimRuntime``, whose attributes it uses:
    ``now``, ``groups``, ``service``, ``trace``, its timers (``_at``, ``_cancel``), the member spans (``_span``),
    the endings (``_ended``, ``_raised``) and the trainer's ``_service_changed``."""

    def _call(self, g: SimGroup, i: int) -> None:
        """Member ``i`` makes its next model call: it joins the service's queue."""
        g.members[i].since = self.now
        self.service.request((*g.key, i))
        self._serve()

    def _serve(self) -> None:
        """An idle service with calls queued starts its next batch."""
        ends = self.service.start(self.now)
        if ends is not None:
            self._at(ends, Timer.BATCH_DONE)
            self._service_changed()

    def _t_batch_done(self) -> None:
        svc = self.service
        if self.trace is not None:
            self.trace.span("batch", SERVICE, svc.started, self.now, size=svc.size, prompt_tokens=0, new_tokens=0)
        while (key := svc.next_answer()) is not None:  # a member's answer may withdraw a later one (a cancel)
            self._answered(key)
        svc.finish()
        if svc.handoff_s > 0:
            svc.handing_off = True
            self._at(self.now + svc.handoff_s, Timer.SERVICE_FREE)
        else:
            self._serve()
        self._service_changed()  # idle now (or busy again at once: no change)

    def _t_service_free(self) -> None:
        self.service.handing_off = False
        self._serve()

    def _answered(self, key: tuple[int, int, int]) -> None:
        """Member ``key``'s model call is answered: its environment step, if it takes any time, else its turn ends."""
        s, q, i = key
        g = self.groups[(s, q)]
        m = g.members[i]
        if m.lane is not None:
            self._span(m, "model_call", m.since, turn=m.turn + 1)
        m.turn += 1
        step = m.out.env_steps[m.turn - 1] if m.out.env_steps else 0.0
        if step > 0:
            m.since = self.now
            m.timer = self._at(self.now + step, Timer.ENV_STEPPED, key)
        else:
            self._turn_done(g, i)

    def _t_env_stepped(self, s: int, q: int, i: int) -> None:
        g = self.groups[(s, q)]
        m = g.members[i]
        m.timer = None
        if m.lane is not None:
            self._span(m, "env_step", m.since, turn=m.turn)
        self._turn_done(g, i)

    def _turn_done(self, g: SimGroup, i: int) -> None:
        m = g.members[i]
        if m.turn == m.out.error_turn:
            self._raised(g, i)
        elif m.turn >= m.out.turns:
            self._ended(g, i)
        else:
            self._call(g, i)

    def _t_timed_out(self, s: int, q: int, i: int) -> None:
        """The member's time limit: it stops its turn and ends, failing (as a duration cut at ``timeout_s``)."""
        g = self.groups[(s, q)]
        m = g.members[i]
        m.deadline = None
        self._stop_turn(g, i)
        m.out = m.out._replace(passed=False)
        self._ended(g, i)

    def _stop_turn(self, g: SimGroup, i: int) -> None:
        """Stop member ``i``'s turn where it stands: its environment step's timer, or its call at the service."""
        m = g.members[i]
        name = "model_call" if m.timer is None else "env_step"
        if m.timer is None:
            self.service.withdraw((*g.key, i))
        self._cancel(m.timer)
        m.timer = None
        if m.lane is not None:
            self._span(m, name, m.since, turn=m.turn + (name == "model_call"))


__all__ = ["ModelService", "TurnsMixin"]
