"""GroupRolloutWorkflow: failure and cancellation, stragglers with rolling starts, verdicts and datums, class flags."""

from __future__ import annotations

import asyncio

import pytest
from config_kit import schema_config
from live_harness import (
    FakeService,
    FakeTrainer,
    Outcome,
    ScriptedWorkflow,
    SleepyService,
    dispatch_harness,
    live_runtime,
    run_virtual,
)

from platoon.live.agent.harness import default_renderer
from platoon.live.agent.messages import Message
from platoon.live.envs.number_search import GUESS, NumberSearch
from platoon.live.rollouts.workflow import (
    GroupRolloutWorkflow,
    GroupRow,
    workflow_gives_verdicts,
    workflow_runs_on_lease,
)
from platoon.policy.members import MemberWatch
from platoon.policy.outputs import GroupOutput

ROW = GroupRow((1, 0), "t0", None, 4)


class Unwinding(ScriptedWorkflow):
    """Members take ``unwind_s`` to unwind from a cancellation (a sandbox that closes), and log when they are done."""

    def __init__(self, *args, unwind_s: float = 0.5, **kwargs):
        super().__init__(*args, **kwargs)
        self.unwind_s = unwind_s

    async def arun_episode_single(self, row):
        try:
            return await super().arun_episode_single(row)
        except asyncio.CancelledError:
            await asyncio.sleep(self.unwind_s)
            self.log.append((asyncio.get_running_loop().time(), "unwound", row.key, row.member))
            raise


def test_when_a_member_raises_the_others_are_cancelled_and_the_group_raises_once_they_unwound():
    script = [Outcome(10.0), Outcome(1.0, error=ValueError("member 1 broke")), Outcome(10.0), Outcome(0.5, 1.0)]
    wf = Unwinding(lambda row: script[row.member])

    async def main():
        loop = asyncio.get_running_loop()
        with pytest.raises(ValueError, match="member 1 broke"):
            await wf.arun_episode(ROW)
        return loop.time()

    raised_at = run_virtual(main())
    assert raised_at == pytest.approx(1.5)  # not at 1.0: it waits until members 0 and 2 have unwound
    events = {(what, m) for _, what, _, m in wf.log}
    assert {("cancelled", 0), ("cancelled", 2), ("unwound", 0), ("unwound", 2), ("raise", 1), ("end", 3)} <= events
    assert ("end", 0) not in events and ("end", 2) not in events


def test_a_cancelled_group_returns_only_once_all_its_rollouts_unwound():
    wf = Unwinding(lambda row: Outcome(10.0), unwind_s=0.5)

    async def main():
        loop = asyncio.get_running_loop()
        group = asyncio.ensure_future(wf.arun_episode(ROW))
        await asyncio.sleep(2.0)
        group.cancel()
        with pytest.raises(asyncio.CancelledError):
            await group
        return loop.time()

    assert run_virtual(main()) == pytest.approx(2.5)
    assert sorted(m for _, what, _, m in wf.log if what == "unwound") == [0, 1, 2, 3]


def test_a_second_cancel_while_unwinding_still_waits_for_every_rollout():
    wf = Unwinding(lambda row: Outcome(10.0), unwind_s=1.0)

    async def main():
        loop = asyncio.get_running_loop()
        group = asyncio.ensure_future(wf.arun_episode(ROW))
        await asyncio.sleep(2.0)
        group.cancel()
        await asyncio.sleep(0.5)
        group.cancel()
        with pytest.raises(asyncio.CancelledError):
            await group
        return loop.time()

    assert run_virtual(main()) == pytest.approx(3.0)
    assert len([1 for _, what, _, _ in wf.log if what == "cancelled"]) == 4  # each member cancelled once


def test_verdicts_members_and_datums():
    async def run(rewards):
        wf = ScriptedWorkflow(lambda row: Outcome(1.0, reward=rewards[row.member]))
        return await wf.arun_episode(GroupRow((1, 0), "t0", None, len(rewards), version=3))

    mixed = run_virtual(run([1.0, 0.0, 0.25, 1.0]))
    assert isinstance(mixed, GroupOutput) and mixed.verdict == "trained"
    assert [m.reward for m in mixed.members] == [1.0, 0.0, 0.25, 1.0]
    assert [m.passes(1.0) for m in mixed.members] == [True, False, False, True]
    assert all(m.versions == {"main": (3, 3)} for m in mixed.members)
    advantages = [d["advantage"] for d in mixed.datums]
    assert len(advantages) == 4 and sum(advantages) == pytest.approx(0.0, abs=1e-9)
    assert advantages[0] > advantages[2] > advantages[1]
    alike = run_virtual(run([0.5, 0.5, 0.5]))
    assert alike.verdict == "uniform" and [d["advantage"] for d in alike.datums] == [0.0] * 3


def test_the_default_rollout_plays_the_environment_with_the_model_service():
    env = NumberSearch(ranges=(4,))
    service = FakeService(vocab=default_renderer([env]).tokenizer.vocab_size)
    wf = GroupRolloutWorkflow({"ns": env}, service, seed=5, max_new_tokens=1)
    task_id = env.task_ids("train")[0]
    # a mixture's row: the pool's id for events and logs, the environment's own for the environment
    out = run_virtual(wf.arun_episode(GroupRow((1, 0), f"ns::{task_id}", "ns", 3, env_task_id=task_id)))
    assert len(out.members) == 3 and all(m.valid and m.steps >= 1 for m in out.members)
    assert len(out.datums) == 3
    prompt = wf.renderer.prompt([Message("user", env.episode(env.task(task_id)).reset())], (GUESS,))
    for datum, member in zip(out.datums, out.members, strict=True):
        assert datum["tokens"][: len(prompt)] == prompt
        assert sum(datum["mask"]) == member.steps  # one token per turn (the service's)
    assert service.calls == sum(m.steps for m in out.members)


# -- stragglers -------------------------------------------------------------------------------------------------------
def straggler_run(seconds, *, permits, timeout_s, quorum=None, group_size=4):
    """One group under the live runtime, members running ``seconds[i]``; its members' start, end and cut times."""
    d = dispatch_harness.build(tasks=2, group_size=group_size, batch_size=1, steps=1, permits=permits)
    warnings = []
    wf = ScriptedWorkflow(lambda row: Outcome(seconds[row.member], reward=float(row.member % 2)),
                          straggler_timeout_s=timeout_s, quorum=quorum, warn=warnings.append)
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService(),
                           members=MemberWatch(timeout_s=timeout_s, quorum=quorum),
                           log=lambda level, message: warnings.append(message) if level == "warning" else None)
    run_virtual(runtime.run())
    times = {(what, m): t for t, what, _, m in wf.log}
    members = runtime.trained[0].groups[0].record.members
    return times, [m.disposition for m in members], warnings


def test_members_started_together_share_one_deadline():
    times, dispositions, warnings = straggler_run([1.0, 2.0, 3.0, 100.0], permits=4, timeout_s=2.0)
    assert times[("cancelled", 3)] == pytest.approx(3.0 + 2.0)  # the quorum (3 of 4) at t=3, plus the timeout
    assert dispositions == ["completed", "completed", "completed", "straggler_killed"]
    assert len(warnings) == 1


def test_each_deadline_is_shifted_by_its_members_start_delay():
    # two permits: members 0 and 1 start at 0; 2 starts at t=1 (delay 1) on member 0's permit, 3 at t=2 (delay 2)
    times, dispositions, _ = straggler_run([1.0, 2.0, 100.0, 0.5], permits=2, timeout_s=5.0)
    assert times[("start", 2)] == pytest.approx(1.0) and times[("start", 3)] == pytest.approx(2.0)
    # quorum (3 finished) at t=2.5; member 2's deadline is 2.5 + 5 + (1 - 0), not 7.5
    assert times[("cancelled", 2)] == pytest.approx(8.5)
    assert dispositions == ["completed", "completed", "straggler_killed", "completed"]


def test_a_member_that_has_not_started_cannot_pass_its_deadline():
    # quorum 1: reached at t=1 (member 0). Member 1 (delay 0) is cut at 1 + 2 = 3; member 2 started at t=1
    # (delay 1) is cut at 4; member 3 waits for a permit until member 1's comes back at t=3, so its deadline is
    # fixed then: 1 + 2 + (3 - 0) = 6
    times, dispositions, warnings = straggler_run([1.0, 100.0, 100.0, 100.0], permits=2, timeout_s=2.0, quorum=1)
    assert times[("cancelled", 1)] == pytest.approx(3.0)
    assert times[("start", 3)] == pytest.approx(3.0)
    assert times[("cancelled", 2)] == pytest.approx(4.0)
    assert times[("cancelled", 3)] == pytest.approx(6.0)
    assert dispositions == ["completed"] + ["straggler_killed"] * 3
    assert len(warnings) == 1  # once per group


def test_no_straggler_policy_waits_for_every_member():
    times, dispositions, warnings = straggler_run([1.0, 2.0, 3.0, 50.0], permits=4, timeout_s=None)
    assert times[("end", 3)] == pytest.approx(50.0)
    assert dispositions == ["completed"] * 4 and warnings == []


def test_a_live_run_cuts_each_group_by_its_labels_policy_else_its_entrys_else_the_runs():
    """straggler_policies by train.label_by: entry a's "slow" tasks take the label's 2 s, its other task the run's
    50 s; entry b's task (label "plain" too, no policy) its entry's own 5 s."""
    import re

    from platoon.components import build_policy
    from platoon.live.runtime import LiveRuntime
    from platoon.policy.pool import EntrySpec, TaskPool

    cfg = schema_config([
        "train.max_training_steps=6", "train.batch_size=1", "train.max_concurrent_rollouts=4", "train.label_by=kind",
        "train.workflow_config.group_size=4", "train.workflow_config.straggler_timeout_seconds=50.0",
        "train.workflow_config.straggler_policies={slow: {timeout_seconds: 2.0}}",
        "environments=[{name: a}, {name: b, workflow_config: {straggler_timeout_seconds: 5.0}}]"])
    pool = TaskPool.from_entries([EntrySpec("a", ["a0", "a1"], 4, label=["slow", "plain"]),
                                  EntrySpec("b", ["b0"], 4, label="plain")], label_column="kind")
    driver = build_policy(cfg, pool, runtime="live").driver
    tasks, warnings = {}, []

    def script(row):
        assert row.task_id == f"{row.entry}::{row.env_task_id}"  # the runtime hands both ids
        tasks[row.key] = row.env_task_id
        return Outcome([1.0, 2.0, 3.0, 100.0][row.member], reward=float(row.member % 2))

    runtime = LiveRuntime(driver, ScriptedWorkflow(script), FakeTrainer(), SleepyService(),
                          log=lambda level, message: warnings.append(message) if level == "warning" else None)
    run_virtual(runtime.run())
    cut = {}
    for w in warnings:
        if m := re.match(r"rollout 3 of group \((\d+), (\d+)\) ran past its straggler deadline \(([\d.]+)s after", w):
            cut[tasks[int(m[1]), int(m[2])]] = float(m[3])
    assert cut == {"a0": 2.0, "a1": 50.0, "b0": 5.0}


# -- flags ------------------------------------------------------------------------------------------------------------
def test_class_flags_follow_the_inheritance_rule():
    class Plain(GroupRolloutWorkflow):
        pass

    class OwnEpisode(GroupRolloutWorkflow):
        async def arun_episode(self, row):
            return await super().arun_episode(row)

    class Declared(OwnEpisode):
        runs_rollouts_on_lease = True

    class Mixin:
        async def _run_group_member(self, row, index):
            raise NotImplementedError

    class Mixed(Mixin, GroupRolloutWorkflow):
        pass

    class SingleOnly(GroupRolloutWorkflow):
        async def arun_episode_single(self, row):
            raise NotImplementedError

    assert workflow_runs_on_lease(GroupRolloutWorkflow) and workflow_gives_verdicts(GroupRolloutWorkflow)
    assert workflow_runs_on_lease(Plain) and workflow_runs_on_lease(SingleOnly)
    assert not workflow_runs_on_lease(OwnEpisode) and workflow_runs_on_lease(Declared)
    assert not workflow_runs_on_lease(Mixed)
    assert all(workflow_gives_verdicts(c) for c in (Plain, OwnEpisode, Declared, Mixed))


def test_a_workflow_without_the_flag_gets_its_permits_whole():
    class OwnEpisode(ScriptedWorkflow):
        async def arun_episode(self, row):
            return await super().arun_episode(row)

    assert not workflow_runs_on_lease(OwnEpisode)
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, permits=2,
                               rolling=workflow_runs_on_lease(OwnEpisode))
    wf = OwnEpisode(lambda row: Outcome([1.0, 3.0][row.member], reward=float(row.member)))
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService())
    run_virtual(runtime.run())
    starts = sorted(t for t, what, key, _ in wf.log if what == "start" and key == (1, 1))
    assert starts == [3.0, 3.0]  # not rolling: the second group waits for both permits
