"""How many rollout events a second does the dispatcher take, alone (no SimPy, no run directory)?

A scripted loop feeds it what a runtime would: ``StartGroup`` -> members enter their blocks in order; ``GrantPermit``
-> the rollout ends after an exponential time (a heap of ends); a group's last end -> ``on_group_finished`` with a
mixed or uniform output; the trainer takes, commits and publishes a step the moment its batch is complete. Rollout
events are the calls a rollout makes (``on_block_entered``, ``on_block_exited``) plus its share of
``on_group_finished``; their rate is counted over the time spent inside those calls only. The per-step calls
(``take_step``/``poll``/``commit_step``/``step_metrics``/``publish``) are timed apart, per step.

Target: well over 100,000 rollout events/s at 256 and at 4096 permits. Then the hot spots of the policy layer
(cProfile, by own time) for the 4096-permit run.

Run: ``.venv/bin/python benchmarks/bench_dispatcher.py`` (``--quick`` for a short pass).
"""

from __future__ import annotations

import cProfile
import heapq
import io
import pstats
import random
import statistics
import sys
import time

from platoon.components import admission_set, sampler_set
from platoon.policy.dispatcher import DispatchConfig, Dispatcher, StartGroup
from platoon.policy.outputs import GroupOutput
from platoon.policy.permits import GrantPermit
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.stats import MemberResult

QUICK = "--quick" in sys.argv
GROUP = 8
TASKS = 1024
REPEATS = 3


def build(permits: int, steps: int) -> Dispatcher:
    pool = TaskPool.from_entries([EntrySpec("env", [f"t{i}" for i in range(TASKS)], GROUP)])
    batch = permits // GROUP
    samplers = sampler_set(pool, run_sampler="auto", run_options={}, entry_samplers={}, batch_size=batch, seed=0)
    recorder = StatsRecorder.for_pool(pool)
    recorder.add_listener(samplers.observe)
    rules = admission_set(run_rule="all", run_options={}, entry_rules={}, entries=pool.entries, batch_size=batch)
    config = DispatchConfig(batch_size=batch, steps=steps, max_concurrent_rollouts=permits, max_staleness=1)
    return Dispatcher(config, pool, samplers, recorder, rules)


def output(passes: list[bool]) -> GroupOutput:
    members = tuple(MemberResult(reward=float(p), scored=float(p), valid=True, outcome="scored",
                                 versions={"main": (0, 0)}) for p in passes)
    verdict = "trained" if 0 < sum(passes) < len(passes) else "uniform"
    return GroupOutput(verdict, members, tuple((i, float(p)) for i, p in enumerate(passes)))


def drive(permits: int, steps: int, seed: int) -> tuple[float, int, float]:
    """(rollout events/s inside the event calls, rollouts, mean ms per step of the step calls)."""
    d = build(permits, steps)
    rng = random.Random(seed)
    heap: list = []
    left: dict = {}
    passes: dict = {}
    n = 0
    in_events = in_steps = 0.0
    events = rollouts = 0
    clock = time.perf_counter

    def carry(decisions, now):
        nonlocal n, in_events, events
        queue = list(decisions)
        while queue:
            dec = queue.pop(0)
            if isinstance(dec, StartGroup):
                left[dec.key] = dec.group_size
                passes[dec.key] = [rng.random() < 0.5 for _ in range(dec.group_size)]
                for i in range(dec.group_size):
                    t0 = clock()
                    out = d.on_block_entered(dec.key, i, now=now)
                    in_events += clock() - t0
                    events += 1
                    queue += out
            elif isinstance(dec, GrantPermit):
                n += 1
                heapq.heappush(heap, (now + rng.expovariate(1.0), n, dec.key, dec.index))

    def trainer(now):
        nonlocal in_steps
        t0 = clock()
        step = d.take_step(now=now)
        decisions = d.poll(now=now)
        if step is not None:
            d.commit_step(now=now)
            d.step_metrics(now=now)
            decisions += d.publish(now=now)
        in_steps += clock() - t0
        carry(decisions, now)

    t0 = clock()
    first = d.start(now=0.0)
    in_steps += clock() - t0
    carry(first, 0.0)
    while heap and d.phase.value != "finished":
        now, _, key, index = heapq.heappop(heap)
        t0 = clock()
        out = d.on_block_exited(key, index, now=now)
        in_events += clock() - t0
        events += 1
        rollouts += 1
        carry(out, now)
        left[key] -= 1
        if left[key] == 0:
            t0 = clock()
            out = d.on_group_finished(key, output(passes.pop(key)), now=now)
            in_events += clock() - t0
            events += 1
            del left[key]
            carry(out, now)
            trainer(now)
    return events / in_events, rollouts, 1000.0 * in_steps / max(1, d.step)


def main() -> None:
    for permits in (256, 4096):
        steps = (20 if QUICK else 60) if permits == 256 else (4 if QUICK else 12)
        runs = [drive(permits, steps, seed) for seed in range(REPEATS)]
        rate = statistics.median(r[0] for r in runs)
        print(f"{permits} permits (batch {permits // GROUP} groups of {GROUP}, {TASKS} tasks, {runs[0][1]} rollouts "
              f"a run): {rate:,.0f} rollout events/s (median of {REPEATS}: "
              f"{', '.join(f'{r[0]:,.0f}' for r in runs)}; target > 100,000: {'ok' if rate > 100_000 else 'MISSED'}); "
              f"the step calls {statistics.median(r[2] for r in runs):.1f} ms a step")
    profile = cProfile.Profile()
    profile.enable()
    drive(4096, 4 if QUICK else 8, 0)
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(r"platoon/policy", 12)
    print("hot spots of the policy layer (4096 permits, by own time):")
    print("\n".join(line for line in out.getvalue().splitlines() if "platoon/policy" in line or "ncalls" in line))


if __name__ == "__main__":
    main()
