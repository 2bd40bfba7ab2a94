"""A tiny scripted runtime for driver tests: it carries out every decision a ``Driver`` answers, as the simulator
does (platoon/sim/runtime.py, platoon/sim/rollouts.py), keeps a naive model of each member, and records every
decision in order, so tests can read invariants off what was handed out and compare the traces of twins.

It never reads the driver's private fields; the tests feed it events (a member ends, the trainer finishes, time
passes) and it answers the driver's decisions and polls after each, as a runtime must.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from config_kit import schema_config

from platoon.components import build_policy
from platoon.policy import (
    CYCLE_DECISIONS,
    Abort,
    AwaitTeardowns,
    CancelRollout,
    EndTeardownWait,
    Evaluate,
    Finish,
    GrantPermit,
    GroupOutput,
    MemberResult,
    Publish,
    SaveCheckpoint,
    SlotGranted,
    StartGroup,
    Train,
    WriteRow,
)
from platoon.policy.pool import EntrySpec, TaskPool

TASKS = ["t0", "t1", "t2", "t3", "t4", "t5"]
GROUP_SIZE = 2
BATCH_SIZE = 2


def overrides(*, steps: int, permits: int, release: str, staleness: int | None, slots: int | None,
              eval_every: int | None, at_start: bool, ck_every: int | None, recovery: int | None,
              straggler: float | None) -> list[str]:
    """The config of a small run (groups of 2, batches of 2, 6 tasks) as ``load_config`` overrides."""
    out = [f"train.batch_size={BATCH_SIZE}", f"train.workflow_config.group_size={GROUP_SIZE}",
           f"train.max_training_steps={steps}", f"train.max_concurrent_rollouts={permits}",
           f"train.permit_release={release}", "train.workflow_config.worker_startup_budget_seconds=10.0",
           f"eval.at_start={str(at_start).lower()}"]
    if staleness is not None:
        out.append(f"train.max_staleness={staleness}")
    if slots is not None:
        out.append(f"train.max_starting_rollouts={slots}")
    if eval_every is not None:
        out.append(f"eval.every={eval_every}")
    if ck_every is not None:
        out.append(f"checkpoint.every={ck_every}")
    if recovery is not None:
        out.append(f"checkpoint.recovery_every={recovery}")
    if straggler is not None:
        out.append(f"train.workflow_config.straggler_timeout_seconds={straggler}")
    return out


def build_driver(ov: list[str]):
    cfg = schema_config(ov)
    pool = TaskPool.from_entries([EntrySpec(cfg.environments[0].label, TASKS, group_size=GROUP_SIZE)])
    return build_policy(cfg, pool)


@dataclass
class Member:
    index: int
    phase: str = "new"  # new, wait, slotq, up (slot held), run, teardown, late, done
    permit: bool = False  # holds a permit (a grant with held=True, not yet back)
    version: int | None = None
    passed: bool | None = None
    disposition: str = "completed"


@dataclass
class Group:
    key: tuple[int, int]
    task_id: str
    size: int
    members: list[Member]
    granted_any: bool = False
    finished: bool = False


TOKENS = {SaveCheckpoint: "S", Evaluate: "E", Train: "T", WriteRow: "W", Publish: "P", Finish: "F", Abort: "A"}
ORDER = re.compile(r"S(E?TWS?P)*E?W?F")


@dataclass
class Runtime:
    """Carries out what the driver answers; ``trace``: every decision in order, ``cycle``: the cycle's."""

    layer: object
    enter_at_once: bool = True
    now: float = 0.0
    version: int = 0
    trace: list = field(default_factory=list)
    cycle: list = field(default_factory=list)
    groups: dict = field(default_factory=dict)
    pending: object = None  # the cycle decision being carried out (Evaluate, Train or Publish)
    rows: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    finished: bool = False
    aborted: str | None = None
    events: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    save_hook: object = None  # called with each SaveCheckpoint as it is carried out
    final_row: bool = False  # the final evaluation measured something: its row is due

    @property
    def driver(self):
        return self.layer.driver

    @property
    def slots(self) -> bool:
        return self.driver.start_limit is not None

    def outbox(self) -> None:
        box = self.driver.take_outbox()
        self.events += box.events
        self.warnings += box.warnings

    # -- carrying out
    def carry(self, decisions: list) -> None:
        """Carry out ``decisions`` in order (what they lead to after them), then what ``poll`` answers, until it
        answers nothing."""
        queue = list(decisions)
        while True:
            while queue:
                queue += self.carry_one(queue.pop(0))
            more = self.driver.poll(now=self.now)
            if not more:
                return
            queue += more

    def carry_one(self, dec) -> list:
        self.trace.append(dec)
        d = self.driver
        if isinstance(dec, CYCLE_DECISIONS):
            return self.cycle_decision(dec)
        if isinstance(dec, StartGroup):
            g = Group(dec.key, dec.task_id, dec.group_size, [Member(i) for i in range(dec.group_size)])
            assert dec.key not in self.groups, f"group {dec.key} started twice"
            self.groups[dec.key] = g
            if self.enter_at_once:
                for m in g.members:
                    m.phase = "wait"
                return d.on_group_entered(dec.key, dec.group_size, now=self.now)
            return []
        if isinstance(dec, GrantPermit):
            g = self.groups[dec.key]
            m = g.members[dec.index]
            assert m.phase == "wait", f"GrantPermit for member {dec.index} of {dec.key}, which is {m.phase}"
            if g.finished:  # a late block: it runs on no permit
                assert not dec.held, f"a held permit granted to {dec.key}, whose group finished"
                m.phase = "late"
                return []
            # under permit_release: group the group holds its permits and its blocks none
            m.permit, g.granted_any, m.version = dec.held, True, self.version
            if d.request_slot(dec.key, dec.index, now=self.now):
                return self.start_up(g, m)
            m.phase = "slotq"
            return []
        if isinstance(dec, SlotGranted):
            s, q, i = dec.key
            m = self.groups[(s, q)].members[i]
            assert m.phase == "slotq", f"SlotGranted for {dec.key}, which is {m.phase}"
            return self.start_up(self.groups[(s, q)], m)
        if isinstance(dec, AwaitTeardowns):
            m = self.groups[dec.key].members[dec.index]
            assert m.phase == "exiting" and m.permit, f"AwaitTeardowns for {dec.key}/{dec.index}: {m.phase}"
            m.phase = "teardown"
            return []
        if isinstance(dec, EndTeardownWait):
            m = self.groups[dec.key].members[dec.index]
            assert m.phase == "teardown", f"EndTeardownWait for {dec.key}/{dec.index}, which is {m.phase}"
            m.phase, m.permit = "done", False
            return []
        if isinstance(dec, CancelRollout):
            return self.cancel(dec)
        raise TypeError(f"cannot carry out {dec!r}")

    def start_up(self, g: Group, m: Member) -> list:
        m.phase = "up"
        self.driver.on_member_started(g.key, m.index, now=self.now, delay_s=0.0)
        return []

    def cancel(self, dec: CancelRollout) -> list:
        g = self.groups.get(dec.key)
        if g is None or g.finished:
            return []
        m = g.members[dec.index]
        if m.phase == "done":
            return []
        if m.phase == "new":  # its task is cancelled before it entered its block: the driver hears nothing
            m.phase, m.passed, m.disposition = "done", None, dec.reason
            return []
        phase = m.phase
        out = self.driver.on_member_cancelled(dec.key, dec.index, now=self.now)
        if phase != "teardown":
            m.passed, m.disposition = None, dec.reason
        m.phase, m.permit = "done", False
        return out

    def cycle_decision(self, dec) -> list:
        self.cycle.append(dec)
        assert self.pending is None, f"{dec} answered while {self.pending} is being carried out"
        assert not self.finished and self.aborted is None, f"{dec} after the end"
        if isinstance(dec, Evaluate | Train | Publish):
            self.pending = dec
        elif isinstance(dec, WriteRow):
            self.rows.append(dec.row)
            self.outbox()
        elif isinstance(dec, SaveCheckpoint):
            self.saves.append(dec)
            self.outbox()
            if self.save_hook is not None:
                self.save_hook(dec)
        elif isinstance(dec, Finish):
            self.finished = True
            self.outbox()
        elif isinstance(dec, Abort):
            self.aborted = dec.reason
        return []

    # -- the runtime's own events
    def tick(self, dt: float) -> None:
        self.now += dt

    def members(self, *phases: str) -> list[tuple[tuple[int, int], int]]:
        return [(k, m.index) for k, g in self.groups.items() for m in g.members if m.phase in phases]

    def enter(self, key, i) -> None:
        g = self.groups[key]
        m = g.members[i]
        assert m.phase == "new"
        m.phase = "wait"
        self.carry(self.driver.on_block_entered(key, i, now=self.now))

    def first_call(self, key, i) -> None:
        m = self.groups[key].members[i]
        assert m.phase == "up"
        m.phase = "run"
        self.carry(self.driver.release_slot(key, i, "first_call", now=self.now))

    def end(self, key, i, *, passed: bool, teardowns: bool, combined: bool) -> None:
        """Member ``i``'s rollout ran to its end and its block exits (``teardowns``: with background teardowns)."""
        d, g = self.driver, self.groups[key]
        m = g.members[i]
        assert m.phase in ("up", "run")
        m.passed, m.phase = passed, "exiting"
        out = d.release_slot(key, i, "end", now=self.now)
        if combined:
            out += d.on_member_exited(key, i, now=self.now, teardowns=teardowns)
        else:
            out += d.on_member_ended(key, i, now=self.now)
            out += d.on_block_exited(key, i, now=self.now, teardowns=teardowns)
        waits = any(isinstance(x, AwaitTeardowns) and x.key == key and x.index == i for x in out)
        if not waits:
            m.phase, m.permit = "done", False
        self.carry(out)

    def late_exit(self, key, i) -> None:
        m = self.groups[key].members[i]
        assert m.phase == "late"
        m.phase = "done"
        assert self.driver.on_block_exited(key, i, now=self.now) == []
        self.carry([])

    def raise_(self, key, i) -> None:
        """Member ``i``'s rollout raised: its group cancels the others once its block exited."""
        d, g = self.driver, self.groups[key]
        m = g.members[i]
        assert m.phase in ("up", "run")
        m.passed, m.disposition = None, "error"
        self.carry(d.release_slot(key, i, "end", now=self.now))
        cancels = d.on_member_ended(key, i, now=self.now, raised=True)
        assert all(isinstance(c, CancelRollout) and c.key == key and c.reason == "cancelled" for c in cancels)
        m.phase, m.permit = "done", False
        self.carry(d.on_block_exited(key, i, now=self.now))
        self.carry(cancels)

    def teardowns_done(self, key, i) -> None:
        m = self.groups[key].members[i]
        assert m.phase == "teardown"
        m.phase, m.permit = "done", False
        self.carry(self.driver.on_teardowns_done(key, i, now=self.now))

    def deadline(self) -> None:
        due = self.driver.next_deadline()
        if due is not None and due > self.now:
            self.now = due
        self.carry(self.driver.on_deadline(now=self.now))

    def output(self, g: Group) -> GroupOutput:
        members, datums = [], []
        for m in g.members:
            if m.passed is None:
                members.append(MemberResult(outcome="none", disposition=m.disposition))
                continue
            r = float(m.passed)
            members.append(MemberResult(reward=r, scored=r, valid=True, outcome="pass" if m.passed else "fail",
                                        disposition="completed", versions={"main": (m.version, m.version)}))
            datums.append((g.task_id, m.index, r))
        passes = [m.passed for m in g.members if m.passed is not None]
        verdict = "no_results" if not passes else ("trained" if 0 < sum(passes) < len(passes) else "uniform")
        return GroupOutput(verdict, tuple(members), tuple(datums))

    def finish_group(self, key, how: str) -> None:
        """The group's workflow returns: ``output`` (its GroupOutput), ``none``, ``error``, ``cancelled`` or
        ``other`` (a result that is no GroupOutput)."""
        g = self.groups[key]
        assert not g.finished
        g.finished = True
        for m in g.members:
            m.permit = False
        kw: dict = {}
        result: object = self.output(g)
        if how == "none":
            result = None
        elif how == "error":
            result, kw = None, {"error": RuntimeError("boom")}
        elif how == "cancelled":
            kw = {"cancelled": True}
        elif how == "other":
            result = {"not": "a GroupOutput"}
        self.carry(self.driver.on_group_finished(key, result, now=self.now, **kw))
        self.forget_done()

    def forget_done(self) -> None:
        for key in [k for k, g in self.groups.items() if g.finished and all(m.phase == "done" for m in g.members)]:
            del self.groups[key]

    # -- the trainer
    def complete(self, *, eval_metrics=None, trainer=None, runtime=None) -> None:
        """The cycle decision being carried out is done: its event, then what the cycle has due."""
        dec, self.pending = self.pending, None
        d = self.driver
        if isinstance(dec, Evaluate):
            self.final_row = self.final_row or (dec.final and bool(eval_metrics))
            out = d.on_evaluated(now=self.now, metrics=eval_metrics)
        elif isinstance(dec, Train):
            out = d.on_trained(now=self.now, trainer=trainer, runtime=runtime)
        else:
            assert isinstance(dec, Publish)
            self.version = dec.version
            out = d.on_published(now=self.now)
        self.carry(out)

    def settleable(self) -> list:
        return [k for k, g in self.groups.items() if not g.finished and all(m.phase == "done" for m in g.members)]

    def drain_once(self) -> bool:
        """One step of a runtime whose rollouts all run to their end: False when nothing is left to do."""
        if self.finished or self.aborted is not None:
            return False
        if self.pending is not None:
            self.now += 0.5
            self.complete(eval_metrics={"pass_at_1": 0.5}, trainer={"loss": 1.0})
            return True
        for key, g in self.groups.items():
            for m in g.members:
                if m.phase == "new":
                    self.enter(key, m.index)
                    return True
                if m.phase in ("up", "run"):
                    self.now += 0.5
                    self.end(key, m.index, passed=(m.index + key[1]) % 2 == 0, teardowns=False, combined=True)
                    return True
                if m.phase == "teardown":
                    self.teardowns_done(key, m.index)
                    return True
                if m.phase == "late":
                    self.late_exit(key, m.index)
                    self.forget_done()
                    return True
        if settled := self.settleable():
            self.finish_group(settled[0], "output")
            return True
        if self.driver.next_deadline() is not None:
            self.deadline()
            return True
        self.carry([])
        return bool(self.pending) or self.finished or self.aborted is not None

    def permits_held(self, release: str) -> int:
        held = 0
        for g in self.groups.values():
            if g.finished:
                continue
            if release == "group":
                held += g.size
            else:
                held += max(sum(m.permit for m in g.members), 0 if g.granted_any else 1)
        return held


def expected_order(steps: int, *, eval_due, checkpoint_due, final_row: bool) -> str:
    """The cycle's decisions of a whole run, one letter each (``TOKENS``)."""
    s = "S"
    for step in range(steps):
        s += ("E" if eval_due(step) else "") + "TW" + ("S" if checkpoint_due(step + 1) else "") + "P"
    return s + ("E" if eval_due(steps) else "") + ("W" if final_row else "") + "F"


def tokens(cycle: list) -> str:
    return "".join(TOKENS[type(d)] for d in cycle)


def finite_or_none(v) -> bool:
    return v is None or not isinstance(v, float) or math.isfinite(v)
