"""The over-budget warning, live: rollouts that a workflow runs after its group returned run on no permit, and once
more ran at once than max_concurrent_rollouts the run says so, once per start."""

from __future__ import annotations

import asyncio

from live_harness import (
    FakeService,
    FakeTrainer,
    Outcome,
    ScriptedWorkflow,
    dispatch_harness,
    live_runtime,
    run_virtual,
)

from platoon.live.rollouts.lease import rollout_lease


class Leaky(ScriptedWorkflow):
    """Returns its group, then runs each member again in the background, in a block of the released lease."""

    def __init__(self, *args, leak: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.leak = leak
        self.background: list[asyncio.Task] = []

    async def arun_episode(self, row):
        output = await super().arun_episode(row)
        if self.leak:
            lease = rollout_lease()

            async def again(i):
                async with lease.rollout(i):
                    await asyncio.sleep(30.0)

            self.background += [asyncio.ensure_future(again(i)) for i in range(row.group_size)]
        return output


def run(leak):
    logged = []
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=3, permits=4)
    wf = Leaky(lambda row: Outcome(1.0, reward=float(row.member % 2)), leak=leak)
    runtime = live_runtime(d, wf, FakeTrainer(), FakeService(), log=lambda lv, m: logged.append((lv, m)))
    run_virtual(runtime.run())
    return [m for lv, m in logged if lv == "warning" and "ran at once" in m], runtime


def test_rollouts_past_their_groups_end_are_warned_about_once():
    warnings, runtime = run(leak=True)
    assert len(warnings) == 1
    assert "more than train.max_concurrent_rollouts (4)" in warnings[0]
    assert all(r["rollout_client/rollouts_in_flight_max"] <= 4 for r in runtime.rows)  # the permits never knew


def test_a_workflow_within_its_blocks_is_not_warned_about():
    warnings, _ = run(leak=False)
    assert warnings == []
