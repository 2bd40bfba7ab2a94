"""Turns mode (``sim.rollout.turns``): the batching model service, one queue and one batch at a time (the rollouts'
turns that use it are ``platoon.sim.rollouts``').

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

A rollout's turns (``platoon.sim.rollouts``): after its start-up it makes a call; when the call is answered it takes its
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

    @property
    def busy(self) -> bool:
        """Whether a batch is running now."""
        return self.started is not None

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


__all__ = ["ModelService"]
