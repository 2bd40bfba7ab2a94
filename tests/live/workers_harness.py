"""Workflows for the rollout-worker tests, in a module a worker imports by name (a test module, imported by path,
is not importable in another process)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from live_harness import trajectory

from platoon.live.lease import background_teardown, first_model_call
from platoon.live.workflow import GroupRolloutWorkflow, GroupRow, Rollout


class SleepyWorkflow(GroupRolloutWorkflow):
    """Member i sleeps ``seconds[i]`` after one model call, leaving a background teardown of ``teardown_s``, and
    scores 1.0 when its index is even; a member of ``raises`` raises ``ValueError``."""

    def __init__(self, seconds, *, raises=(), teardown_s=0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seconds, self.raises, self.teardown_s = list(seconds), set(raises), teardown_s

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        i = row.member
        await self.service.sample((1, 2), max_new_tokens=1, temperature=1.0, seed=i)
        await asyncio.sleep(self.seconds[i])
        if i in self.raises:
            raise ValueError(f"member {i} failed")
        if self.teardown_s:
            background_teardown(asyncio.sleep(self.teardown_s))
        return Rollout(trajectory(row, 1.0 if i % 2 == 0 else 0.0, self.seconds[i]))


class ProbeWorkflow(GroupRolloutWorkflow):
    """Reports what its worker sees (through ``warn``, which the trainer hears): its pid, the environment variable
    ``PLATOON_TEST_PRELOADED``, which of ``modules`` it had imported before its rollout began, and the environments
    its fork server built (by entry name, of the specs in ``workflow.envs``)."""

    def __init__(self, modules=(), **kwargs) -> None:
        super().__init__(**kwargs)
        self.modules = list(modules)

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        from platoon.live.workers.envs import ENVIRONMENTS

        first_model_call()
        built = sorted(label for label, env in self.envs.items() if any(env is e for e in ENVIRONMENTS.values()))
        self.warn(json.dumps({"pid": os.getpid(), "env": os.environ.get("PLATOON_TEST_PRELOADED"),
                              "imported": [m for m in self.modules if m in sys.modules], "built": built}))
        return Rollout(trajectory(row, 0.0, 0.0))
