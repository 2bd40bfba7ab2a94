"""The permits' busy share under permit_release: rollout vs group, in the live runtime, on long-tailed rollouts.

Question: on a workload whose rollout lengths are long-tailed, how much of the rollout budget
(``train.max_concurrent_rollouts``) is at work under each setting? Under ``group`` a group holds its permits until its
slowest rollout ends, so the permits of its finished rollouts sit idle; under ``rollout`` each comes back as its
rollout ends and the next group starts on it.

How: the live asyncio runtime (``platoon.live.runtime.LiveRuntime``) drives the real dispatcher, in real time, with a
workflow whose rollouts sleep lognormal durations (median ``MEDIAN_S``, sigma ``SIGMA``; a pure function of the
group key and member, so both settings see the same lengths for the same draws) and a trainer that takes
``TRAIN_S`` in a worker thread. The permits bind (the horizon is the plan's). The busy share is
``rollout_client/permit_busy_share`` (docs/metrics.md) over the whole run (``busy_share``: the step rows' shares
weighted by their windows' lengths): rollouts holding a permit, time-weighted, over the budget.

Run: ``.venv/bin/python benchmarks/bench_permits_live.py`` (about 10 s).
"""

from __future__ import annotations

import asyncio
import math
import random
import time

from platoon.components import build_policy
from platoon.config import load_config
from platoon.live.launch.build import build_environments, build_pool
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow, Rollout, workflow_runs_on_lease
from platoon.live.runtime import LiveRuntime
from platoon.live.training.datums import Trajectory, Turn

GROUP_SIZE = 8
BATCH = 8
PERMITS = 64
STEPS = 30
MEDIAN_S = 0.04
SIGMA = 1.0
TRAIN_S = 0.02
SEED = 0


class LognormalRollouts(GroupRolloutWorkflow):
    """Each rollout sleeps a lognormal duration drawn from (seed, key, member); reward 1 for the shorter half."""

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        rng = random.Random(f"{SEED}:{row.key}:{row.member}")
        seconds = MEDIAN_S * math.exp(SIGMA * rng.gauss(0.0, 1.0))
        await asyncio.sleep(seconds)
        reward = float(seconds < MEDIAN_S)
        turn = Turn((1, 2), (3,), (-1.0,), row.version)
        return Rollout(Trajectory(row.task_id, (turn,), reward, reward == 1.0, seconds))


class SleepTrainer:
    def train_step(self, datums, *, version):
        time.sleep(TRAIN_S)
        return {"datums": float(len(datums))}

    def policy_state_dict(self):
        return None


class NoService:
    def publish(self, weights, version):
        return None


def busy_share(rows: list[dict]) -> float:
    """The whole run's permit busy share: each step row's share is time-weighted over its window (from the previous
    row), so weighting the rows by their windows' lengths gives the share over the run."""
    steps = [r for r in rows if "rollout_client/permit_busy_share" in r]
    starts = [0.0] + [r["time"] for r in steps[:-1]]
    spans = [r["time"] - start for start, r in zip(starts, steps, strict=True)]
    return sum(s * r["rollout_client/permit_busy_share"] for s, r in zip(spans, steps, strict=True)) / sum(spans)


def run(release: str) -> dict[str, float]:
    cfg = load_config(None, [f"train.max_training_steps={STEPS}", f"train.batch_size={BATCH}",
                             f"train.permit_release={release}", f"train.max_concurrent_rollouts={PERMITS}",
                             "train.max_staleness=null", f"environments.0.workflow_config.group_size={GROUP_SIZE}",
                             f"train.seed={SEED}", "eval.at_start=false", "eval.every=null",
                             "checkpoint.recovery_every=null", "checkpoint.keep_recovery=null"])
    envs = build_environments(cfg)
    policy = build_policy(cfg, build_pool(cfg, envs), rolling=workflow_runs_on_lease(LognormalRollouts),
                          runtime="live")
    runtime = LiveRuntime(policy.driver, LognormalRollouts(), SleepTrainer(), NoService())
    t0 = time.perf_counter()
    asyncio.run(runtime.run())
    wall = time.perf_counter() - t0
    return {"busy": busy_share(runtime.rows), "wall_s": wall, "groups_per_s": STEPS * BATCH / wall}


def main() -> None:
    print(f"live runtime, {PERMITS} permits, groups of {GROUP_SIZE}, {STEPS} steps of {BATCH} groups; rollouts "
          f"lognormal(median {MEDIAN_S * 1000:.0f} ms, sigma {SIGMA}), trainer {TRAIN_S * 1000:.0f} ms a step")
    results = {release: run(release) for release in ("rollout", "group")}
    for release, r in results.items():
        print(f"  permit_release: {release:<8} permits busy {r['busy']:.3f}   wall {r['wall_s']:.2f} s   "
              f"{r['groups_per_s']:.1f} groups/s")
    ratio = results["rollout"]["busy"] / results["group"]["busy"]
    speed = results["rollout"]["groups_per_s"] / results["group"]["groups_per_s"]
    print(f"  rollout / group: busy share x{ratio:.2f}, groups per second x{speed:.2f}")


if __name__ == "__main__":
    main()
