"""A bare SimPy model of the simplest workload, the yardstick of the simulator's speed (benchmarks/bench_simulator.py).

Groups of ``group`` rollouts, all queued at once; each rollout is a SimPy process that takes one permit of a
``Resource`` of ``permits``, holds it for an exponential time (mean ``mean_s``) and gives it back: the workload of
``permit_release: rollout`` with no staleness bound and a trainer that takes no time, without any policy. It lives
here because simpy is imported only under ``platoon/sim``.
"""

from __future__ import annotations

import random
import time

import simpy


def bare_rate(rollouts: int, *, permits: int, group: int, mean_s: float, seed: int = 0) -> float:
    """Simulate ``rollouts`` rollouts (a multiple of ``group``); returns rollouts per wall-clock second."""
    rng = random.Random(seed)
    env = simpy.Environment()
    resource = simpy.Resource(env, capacity=permits)

    def rollout(env: simpy.Environment):
        with resource.request() as req:
            yield req
            yield env.timeout(rng.expovariate(1.0 / mean_s))

    def one_group(env: simpy.Environment):
        yield env.all_of([env.process(rollout(env)) for _ in range(group)])

    t0 = time.perf_counter()
    for _ in range(rollouts // group):
        env.process(one_group(env))
    env.run()
    return rollouts / (time.perf_counter() - t0)


__all__ = ["bare_rate"]
