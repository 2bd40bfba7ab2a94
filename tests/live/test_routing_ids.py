"""Routing ids through the model service: a ``Sample`` carries one when the service sends it, and the training
workflow and evaluation during training say what docs/live-runtime.md says ("Routing ids")."""

from __future__ import annotations

import asyncio

import pytest
from config_kit import schema_config

from platoon.live.envs.number_search import NumberSearch
from platoon.live.inference.service import FakeModelService
from platoon.live.launch.build import evaluate_service
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow
from platoon.policy.routing_ids import RoutingIdWatch

ENV = NumberSearch(ranges=[8])  # every episode here: three model calls (prompts of 17, 25 and 33 tokens)
TASKS = ENV.task_ids("train")


def play(groups, service, warnings, notices=None):
    wf = GroupRolloutWorkflow({"e": ENV}, service, warn=warnings.append)
    wf.inform = (warnings if notices is None else notices).append

    async def main():
        for n, g in enumerate(groups):
            await wf.arun_episode(GroupRow((1, n), TASKS[n], "e", g))

    asyncio.run(main())
    return wf


def test_a_sample_carries_the_routing_id_the_service_sent():
    service = FakeModelService([[1], [2]], routing_ids=lambda prompt, seed: f"rid-{seed}")

    async def main():
        return await service.sample([3], max_new_tokens=1, temperature=1.0, seed=7), \
            await FakeModelService([[1]]).sample([3], max_new_tokens=1, temperature=1.0)

    with_id, without = asyncio.run(main())
    assert with_id.routing_id == "rid-7" and without.routing_id is None


def test_a_service_that_sends_none_is_noted_once_per_start_of_training():
    warnings, notices = [], []
    wf = play([4, 4, 4], FakeModelService(lambda p, s: [5]), warnings, notices)
    assert warnings == [] and len(notices) == 1 and "sends no routing ids, as expected for a dense model" in notices[0]
    assert wf.step_metrics() == {"train/rollout_worker_routing_id_coverage": 0.0}
    play([4], FakeModelService(lambda p, s: [5]), warnings, notices)  # a new start: a new workflow, noted again
    assert warnings == [] and len(notices) == 2


def test_rollouts_with_some_ids_or_none_after_some_are_warned_about_each():
    sends = {"mode": "none"}

    def routing(prompt, seed):
        mode = sends["mode"]
        return None if mode == "none" or (mode == "first" and len(prompt) > 17) else "rid"

    warnings = []
    wf = GroupRolloutWorkflow({"e": ENV}, FakeModelService(lambda p, s: [5], routing_ids=routing),
                              warn=warnings.append)
    wf.inform = warnings.append  # the notice first, then the warnings, in order

    async def group(n, size, mode):
        sends["mode"] = mode
        await wf.arun_episode(GroupRow((1, n), TASKS[n], "e", size))

    asyncio.run(group(0, 4, "none"))
    assert len(warnings) == 1
    asyncio.run(group(1, 1, "all"))
    assert "rollout 0 of task" in warnings[1] and "is the first to get routing ids" in warnings[1]
    assert "after 4 without them" in warnings[1] and "and 1 more" in warnings[1]
    asyncio.run(group(2, 2, "first"))
    assert [w.count("got routing ids for 1 of its 3 model calls") for w in warnings[2:]] == [1, 1]
    asyncio.run(group(3, 2, "none"))
    assert sum("after the service had sent some" in w for w in warnings) == 2
    assert wf.step_metrics()["train/rollout_worker_routing_id_coverage"] == pytest.approx((3 + 2) / 27)


def test_evaluation_during_training_warns_for_its_own_rollouts():
    class Slots:
        def __init__(self):
            self.warnings, self.released = [], []

        async def take(self, index):
            return 0.0

        def release(self, index, reason):
            self.released.append((index, reason))

        def warn(self, message):
            self.warnings.append(message)

        def inform(self, message):
            self.warnings.append(message)


    cfg = schema_config(["environments.0.service_kwargs={ranges: [8]}"])
    slots, routing = Slots(), RoutingIdWatch("eval")
    metrics = asyncio.run(evaluate_service(FakeModelService(lambda p, s: [5]), cfg, {cfg.environments[0].label: ENV},
                                           12, slots=slots, routing=routing))
    assert metrics["eval/episodes"] == 12.0 and metrics["eval/rollout_worker_routing_id_coverage"] == 0.0
    assert len(slots.warnings) == 1 and "sends no routing ids, as expected for a dense model" in slots.warnings[0]
    assert sorted(slots.released) == sorted([(j, r) for j in range(12) for r in ("first_call", "end")])
