"""``bench_ray_rollouts.py``'s rollout: a few turns, each a model call that the service answers at once and a tool
call that waits 50-500 ms (a lognormal clipped to that range: most calls short, a few long, as sandboxes' are),
blocking its actor as a sandbox's would. Importable by name, as Ray's workers import it."""

from __future__ import annotations

import random
import time

from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow, Rollout
from platoon.live.training.datums import Trajectory, Turn

TURNS = 3


def tool_wait_s(rng: random.Random) -> float:
    """A tool call's wait: lognormal around 100 ms, clipped to 50-500 ms."""
    return min(0.5, max(0.05, rng.lognormvariate(-2.3, 0.6)))


class WaitingWorkflow(GroupRolloutWorkflow):
    """Each member plays ``TURNS`` turns of a model call then a tool wait, seeded by its group and index."""

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        rng = random.Random(hash((row.key, row.member)) & 0xFFFFFFFF)
        waited = 0.0
        for turn in range(TURNS):
            await self.service.sample((1, 2), max_new_tokens=1, temperature=1.0, seed=turn)
            wait = tool_wait_s(rng)
            time.sleep(wait)  # the tool blocks its actor, as a sandbox's call does
            waited += wait
        reward = float(row.member % 2)
        return Rollout(Trajectory(row.task_id, (Turn((1,), (2,), (-1.0,), 0),), reward, reward > 0, waited))
