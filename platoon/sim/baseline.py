"""A bare SimPy model of a run's rollouts, the yardstick of the simulator's speed (benchmarks/bench_simulator.py).

The honest baseline: a permit ``Resource`` of ``permits``, groups of ``group`` rollouts, each rollout a SimPy process
that takes one permit, holds it for one exponential timeout (mean ``mean_s``) and gives it back. Groups are fed as
permits free, not all queued at once: ``permits // group`` groups are in flight, and each group that finishes starts
the next, so SimPy's own request queue stays short (a model that queues every request up front spends its time in
that queue, which flatters whatever it is compared with). No policy, no trainer, no logs: what a simulator of the
same rollouts cannot do with less. It lives here because simpy is imported only under ``platoon/sim``.
"""

from __future__ import annotations

import random
import time

import simpy


def bare_rate(rollouts: int, *, permits: int, group: int, mean_s: float, seed: int = 0) -> float:
    """Simulate ``rollouts`` rollouts (rounded up to whole groups); returns rollouts per wall-clock second."""
    rng = random.Random(seed)
    env = simpy.Environment()
    resource = simpy.Resource(env, capacity=permits)
    groups = -(-rollouts // group)
    started = 0

    def rollout(env: simpy.Environment):
        with resource.request() as req:
            yield req
            yield env.timeout(rng.expovariate(1.0 / mean_s))

    def one_group(env: simpy.Environment):
        yield env.all_of([env.process(rollout(env)) for _ in range(group)])
        start_next()

    def start_next() -> None:
        nonlocal started
        if started < groups:
            started += 1
            env.process(one_group(env))

    t0 = time.perf_counter()
    for _ in range(max(1, permits // group)):
        start_next()
    env.run()
    return groups * group / (time.perf_counter() - t0)


__all__ = ["bare_rate"]
