"""Workflows for the rollout-worker tests, in a module a worker imports by name (a test module, imported by path,
is not importable in another process)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass

from config_kit import schema_config
from live_harness import trajectory

from platoon.live.rollouts.lease import background_teardown, first_model_call
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow, Rollout


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


class PidWorkflow(SleepyWorkflow):
    """``SleepyWorkflow`` whose members first say their process id (``warn``, which the trainer hears)."""

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        self.warn(json.dumps({"pid": os.getpid()}))
        return await super().arun_episode_single(row)


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


SMALL = ["train.max_training_steps=2", "train.batch_size=4", "train.max_staleness=0",
         "environments.0.workflow_config.group_size=4", "environments.0.service_kwargs={ranges: [4, 8]}",
         "model.d_model=16", "model.n_layers=1"]


def fake_service(model, cfg, version):
    from live_harness import FakeService

    service = FakeService(vocab=model.vocab_size)
    service.version = version
    return service


def train(overrides):
    """A run of the built-in environment on the fake service (seeded tokens: the scripted outcomes): its draw and
    fate events and the datums of each step."""
    from platoon.live.launch.build import build_live
    from platoon.live.runtime import LiveRuntime

    cfg = schema_config([*SMALL, *overrides])
    live = build_live(cfg, service_factory=fake_service, eval_episodes=8)
    steps = []
    record = live.trainer.train_step

    def train_step(datums, *, version):
        steps.append((version, [dict(d) for d in datums]))
        return record(datums, version=version)

    live.trainer.train_step = train_step
    said = []
    runtime = LiveRuntime(live.policy.driver, live.workflow, live.trainer, live.service,
                          log=lambda level, message: said.append((level, message)))
    asyncio.run(runtime.run())
    events = [(e["event"], e.get("start"), e.get("seq"), e.get("task_id"), e.get("position"), e.get("fate"))
              for e in runtime.events if e["event"] in ("draw", "fate")]
    return events, steps, said, live


def group(workflow, workers, size):
    """Run one group of ``workflow`` (outside a training draw: its own straggler rules) with its rollouts in
    ``workers``; the output and the seconds it took."""
    workflow.rollout_workers = workers

    async def run():
        began = time.perf_counter()
        try:
            return await workflow.arun_episode(GroupRow((1, 0), "n4-g3-t1", "e", size)), time.perf_counter() - began
        finally:
            await workers.aclose()

    return asyncio.run(run())


@dataclass(frozen=True)
class SamplingEpisode:
    """A rollout (a worker's ``Episode``) of ``turns`` model calls of ``new_tokens`` each: a prompt of its ``first``
    token (``prompt_len`` times), then of each call's tokens; its value is each call's (tokens, version, server,
    logprobs)."""

    turns: int
    first: int = 1
    prompt_len: int = 1
    new_tokens: int = 3
    pause_after: int | None = None  # a file this episode waits for after that many calls (a test's weight sync)
    gate: str | None = None

    def start(self, envs, service, warn):
        return self._play(service)

    async def _play(self, service):
        out, prompt = [], [self.first] * self.prompt_len
        for turn in range(self.turns):
            if self.pause_after == turn and self.gate is not None:
                while not os.path.exists(self.gate):
                    await asyncio.sleep(0.02)
            sample = await service.sample(prompt, max_new_tokens=self.new_tokens, temperature=1.0, seed=10 + turn,
                                          stop=[[99]])
            out.append((sample.tokens, sample.version, sample.server, sample.logprobs))
            prompt = prompt + list(sample.tokens)
        return out
