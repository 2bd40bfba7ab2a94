"""Plain-data records of the simulator's work in flight: groups and their members, and the kinds of its timers.

Everything here round-trips through JSON exactly (floats are written as Python's shortest repr), so that a
checkpoint's ``sim-<step>.json`` restores the groups in flight as they stood.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from platoon.policy import MemberResult
from platoon.sim.workload import GroupDraws, MemberOutcome


class Timer(Enum):
    """What a timer record does when it fires (its value is what checkpoints store)."""

    STARTED_UP = "started_up"                  # a member's own start-up work is done: its first model call
    LAUNCH_WAITED = "launch_waited"            # a member's wait at the launch gate reached its limit: it goes ahead
    STARTUPS_DONE = "startups_done"            # the shared start-up capacity finished some members' start-ups
    ROLLOUT_ENDED = "rollout_ended"
    ROLLOUT_RAISED = "rollout_raised"
    TEARDOWN_ENDED = "teardown_ended"
    TEARDOWN_OUTLASTED = "teardown_outlasted"  # the permit's wait for the teardown ran out first
    DEADLINE = "deadline"                      # the driver's next deadline
    TRAINED = "step_trained"
    PUBLISHED = "step_published"
    EVALUATED = "evaluated"                    # the trainer's evaluation (before a step, or the final one)
    BATCH_DONE = "batch_done"                  # the model service answered its batch (turns mode)
    SERVICE_FREE = "service_free"              # the service's hand-off after a batch is over (turns mode)
    ENV_STEPPED = "env_stepped"                # a member's environment step is done (turns mode)
    TIMED_OUT = "timed_out"                    # a member's time limit (turns mode)
    SERVER_DONE = "server_done"                # an inference server answered its oldest request (turns, vllm)
    SERVERS_PAUSED = "servers_paused"          # a publish reached its pause: the weights reload (turns, vllm)

    __hash__ = object.__hash__  # Enum's own hashes the name in Python: a timer's kind is looked up at every event


class Phase(Enum):
    """Where a member stands: waiting for its permit, for a start slot, for the launch gate (its rollout began; a
    worker's launch held: ``rollout_isolation: process``), starting up (up to its first model call), running,
    waiting for its teardown (its permit held), done."""

    WAIT = "wait"
    SLOT = "slot"
    LAUNCH = "launch"
    STARTUP = "startup"
    RUN = "run"
    TEARDOWN = "teardown"
    DONE = "done"


@dataclass(slots=True)
class SimMember:
    """One member of a group in flight. ``out`` is decided when its permit is granted; ``timer`` is the seq of the
    pending timer that ends its phase (in turns mode: its environment step; None while its model call is at the
    service). Turns mode: ``turn`` counts the model calls answered, ``deadline`` is the seq of its time limit's
    timer. ``since``: when its current span began (launch wait, start-up after the launch gate, model call,
    environment step, teardown); ``lane``: its trace lane (None: not traced). At the launch gate ``started`` is when
    its rollout began and ``timer`` is the seq of its wait's limit."""

    phase: Phase = Phase.WAIT
    granted: float | None = None
    started: float | None = None
    version: int = 0
    out: MemberOutcome | None = None
    timer: int | None = None
    result: MemberResult | None = None
    turn: int = 0
    deadline: int | None = None
    since: float | None = None
    lane: int | None = None

    def to_json(self) -> list:
        o = self.out
        out = None if o is None else [o.passed, o.valid, o.first_call_s, o.run_s, o.error_at_s, o.teardown_s]
        if o is not None and o.turns:
            out += [o.turns, list(o.env_steps), o.error_turn]
        return [self.phase.value, self.granted, self.started, self.version, out, self.timer,
                None if self.result is None else self.result.to_json(), self.turn, self.deadline, self.since,
                self.lane]

    @classmethod
    def from_json(cls, d: list) -> SimMember:
        phase, granted, started, version, out, timer, result, *more = d  # a checkpoint before turns has no more
        if out is not None and len(out) > 6:
            out = [*out[:7], tuple(out[7]), out[8]]
        return cls(Phase(phase), granted, started, version, None if out is None else MemberOutcome(*out), timer,
                   None if result is None else MemberResult.from_json(result), *more)


@dataclass(slots=True)
class SimGroup:
    """A group in flight: its draw and its members."""

    key: tuple[int, int]
    row: int
    task_id: str
    entry: int
    size: int
    created: float
    members: list[SimMember]
    pending: int
    failed: bool = False
    draws: GroupDraws | None = field(default=None)

    def to_json(self) -> list:
        return [list(self.key), self.row, self.task_id, self.entry, self.size, self.created,
                [m.to_json() for m in self.members], self.pending, self.failed]

    @classmethod
    def from_json(cls, d: list) -> SimGroup:
        key, row, task_id, entry, size, created, members, pending, failed = d
        return cls(tuple(key), row, task_id, entry, size, created, [SimMember.from_json(m) for m in members],
                   pending, failed)


__all__ = ["Phase", "SimGroup", "SimMember", "Timer"]
