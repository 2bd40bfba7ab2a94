"""A tiny scripted runtime for dispatcher tests: an event heap, deterministic rollout outcomes, no simpy.

It drives the dispatcher exactly as the real runtimes do (StartGroup -> members enter their blocks in order;
GrantPermit -> the rollout runs for its scripted duration; the last member's end -> on_group_finished; the trainer
takes, trains, commits and publishes) and records every decision, so tests can compare traces.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from platoon.components import admission_set, sampler_set
from platoon.policy.dispatcher import DispatchConfig, Dispatcher, StartGroup
from platoon.policy.outputs import GroupOutput, TrainStep
from platoon.policy.permits import GrantPermit
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.stats import MemberResult


def build(*, tasks: int = 12, group_size: int = 4, batch_size: int = 4, steps: int = 6, permits: int | None = None,
          permit_release: str = "rollout", max_staleness: int | None = 1, sampler: str = "auto",
          sampler_options: dict | None = None, admission: str = "all", admission_options: dict | None = None,
          rolling: bool = True, seed: int = 0, entries: list[EntrySpec] | None = None,
          max_groups_per_step: float = 3.0, entry_staleness: dict | None = None, start: int = 1,
          uniform_groups_update: bool = True) -> Dispatcher:
    """A dispatcher over ``tasks`` tasks. ``uniform_groups_update``: by default a step of only uniform groups still
    updates (as under a loss with an entropy term), so the version moves on at every step that trains a group and
    the tests of staleness and versions need not script mixed outcomes; False is 0.4.0's zero-objective rule."""
    entries = entries or [EntrySpec("env", [f"t{i}" for i in range(tasks)], group_size)]
    pool = TaskPool.from_entries(entries)
    largest = max(e.group_size for e in entries)
    config = DispatchConfig(batch_size=batch_size, steps=steps,
                            max_concurrent_rollouts=permits or batch_size * largest,
                            permit_release=permit_release, max_staleness=max_staleness,
                            max_groups_per_step=max_groups_per_step,
                            entry_staleness=entry_staleness or {}, uniform_groups_update=uniform_groups_update)
    samplers = sampler_set(pool, run_sampler=sampler, run_options=sampler_options or {}, entry_samplers={},
                          batch_size=batch_size, seed=seed)
    recorder = StatsRecorder.for_pool(pool, start=start)
    recorder.add_listener(samplers.observe)
    rules = admission_set(run_rule=admission, run_options=admission_options or {}, entry_rules={},
                         entries=pool.entries, batch_size=batch_size)
    return Dispatcher(config, pool, samplers, recorder, rules, rolling=rolling, start=start)


def outcome(seed: int, key: tuple[int, int], index: int, task_id: str) -> tuple[float, bool]:
    """(duration, passed) of a member: a pure function of the seed, the task and the member index."""
    rng = random.Random(f"{seed}:{task_id}:{key[1]}:{index}")
    p = (sum(map(ord, task_id)) % 10) / 10
    return round(rng.expovariate(1.0), 6), rng.random() < p


def output_of(task_id: str, passes: list[bool], version: int) -> GroupOutput:
    members = tuple(MemberResult(reward=float(p), scored=float(p), valid=True, outcome="scored",
                                 disposition="completed", versions={"main": (version, version)}) for p in passes)
    verdict = "trained" if 0 < sum(passes) < len(passes) else "uniform"
    return GroupOutput(verdict, members, tuple((task_id, i, float(p)) for i, p in enumerate(passes)))


@dataclass
class Script:
    """Runs a dispatcher to the end of its plan; ``trace`` lists every decision and step in order."""

    d: Dispatcher
    seed: int = 0
    step_s: float = 0.5
    duration: Callable[[tuple[int, int], int, str], float] | None = None
    trace: list = field(default_factory=list)
    steps: list[TrainStep] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.heap: list = []
        self.n = 0
        self.results: dict = {}
        self.training = False

    def push(self, t: float, what: str, *args) -> None:
        self.n += 1
        heapq.heappush(self.heap, (t, self.n, what, args))

    def carry_out(self, decisions: list, now: float) -> None:
        for dec in decisions:
            self.trace.append(dec)
            if isinstance(dec, StartGroup):
                self.results[dec.key] = {"left": dec.group_size, "passes": [None] * dec.group_size,
                                         "task": dec.task_id, "version": dec.version}
                for i in range(dec.group_size):
                    self.carry_out(self.d.on_block_entered(dec.key, i, now=now), now)
            elif isinstance(dec, GrantPermit):
                task = self.results[dec.key]["task"]
                dur, passed = outcome(self.seed, dec.key, dec.index, task)
                if self.duration is not None:
                    dur = self.duration(dec.key, dec.index, task)
                self.results[dec.key]["passes"][dec.index] = passed
                self.push(now + dur, "exit", dec.key, dec.index)

    def run(self, until_steps: int | None = None) -> Script:
        self.carry_out(self.d.start(now=0.0), 0.0)
        self.try_step(0.0)
        while self.heap:
            t, _, what, args = heapq.heappop(self.heap)
            if what == "exit":
                key, index = args
                self.carry_out(self.d.on_block_exited(key, index, now=t), t)
                r = self.results[key]
                r["left"] -= 1
                if r["left"] == 0:
                    out = output_of(r["task"], r["passes"], r["version"])
                    self.carry_out(self.d.on_group_finished(key, out, now=t), t)
            elif what == "trained":
                self.d.commit_step(now=t)
                self.d.step_metrics(now=t)
                self.training = False
                self.carry_out(self.d.publish(now=t), t)
                if until_steps is not None and self.d.step >= until_steps:
                    return self
            self.try_step(t)
        return self

    def try_step(self, now: float) -> None:
        if self.training or self.d.phase.value != "assembling":
            return
        step = self.d.take_step(now=now)
        self.carry_out(self.d.poll(now=now), now)
        if step is not None:
            self.steps.append(step)
            self.trace.append(("step", step.step, [g.key for g in step.groups], [g.key for g in step.stale]))
            self.training = True
            self.push(now + self.step_s, "trained")
