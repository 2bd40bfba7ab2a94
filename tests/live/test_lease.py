"""The lease face a workflow sees (docs/dispatch.md, docs/live-runtime.md): rollout_lease(), RolloutLease.rollout(i), teardowns."""

from __future__ import annotations

import asyncio

import pytest
from live_harness import (
    FakeTrainer,
    Outcome,
    ScriptedWorkflow,
    SleepyService,
    dispatch_harness,
    live_runtime,
    run_virtual,
    trajectory,
)

from platoon.live.rollouts.lease import RolloutLease, background_teardown, no_lease, rollout_lease
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow, Rollout


def test_outside_a_training_draw_the_lease_is_a_no_op():
    async def main():
        lease = rollout_lease()
        assert isinstance(lease, RolloutLease) and not lease.active and lease.size == 0
        waits = []
        for i in (0, 0, 7, -3, 10**6):
            async with lease.rollout(i) as waited:
                waits.append(waited)
                background_teardown(asyncio.sleep(1.0))  # no block holds it: it simply runs
        async with lease.rollout(1) as a, lease.rollout(1) as b:  # nested, same index: still nothing
            waits += [a, b]
        async with lease.start_slot(3) as slot:
            waits.append(slot)
        return waits, asyncio.get_running_loop().time()

    waits, t = run_virtual(main())
    assert waits == [0.0] * 8
    assert t == 0.0  # nothing waited


class Probe(ScriptedWorkflow):
    """Before running its group normally, the first group probes its lease; after, it tries index 0 again."""

    runs_rollouts_on_lease = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict[str, object] = {}

    async def arun_episode(self, row: GroupRow):
        lease = rollout_lease()
        first = not self.seen
        if first:
            self.seen["lease"] = (lease.active, lease.key, lease.size)
            for bad in (row.group_size, -1, 99):
                try:
                    async with lease.rollout(bad):
                        pass
                except IndexError as exc:
                    self.seen.setdefault("index_errors", []).append(str(exc))
        output = await super().arun_episode(row)
        if first:
            try:
                async with lease.rollout(0):
                    pass
            except RuntimeError as exc:
                self.seen["second_block"] = str(exc)
        return output

    async def arun_episode_single(self, row):
        self.seen.setdefault("inner", []).append((rollout_lease().active, rollout_lease().size))
        return await super().arun_episode_single(row)


@pytest.mark.parametrize("release", ["rollout", "group"])
def test_index_errors_and_second_blocks_under_either_setting(release):
    d = dispatch_harness.build(tasks=4, group_size=3, batch_size=2, steps=2, permit_release=release)
    wf = Probe(lambda row: Outcome(1.0 + row.member, reward=float(row.member == 0)))
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService())
    run_virtual(runtime.run())
    key = wf.seen["lease"][1]
    assert wf.seen["lease"] == (True, key, 3)
    assert len(wf.seen["index_errors"]) == 3
    assert all("outside its draw's lease, of size 3" in m for m in wf.seen["index_errors"])
    assert "entered a second lease block" in wf.seen["second_block"]
    # a member's own rollout sees the no-op lease
    assert set(wf.seen["inner"]) == {(False, 0)}
    # the probes changed nothing: every group trained
    assert [len(s.groups) for s in runtime.trained] == [2, 2]


class RetryWholeGroup(ScriptedWorkflow):
    """Retries the whole group in arun_episode, as 0.3's subclasses did: a second block per index."""

    runs_rollouts_on_lease = True

    async def arun_episode(self, row):
        await super().arun_episode(row)
        return await super().arun_episode(row)


@pytest.mark.parametrize("release", ["rollout", "group"])
def test_a_retry_of_the_whole_group_fails_with_runtime_error(release):
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=1, steps=1, permit_release=release)
    logged = []
    runtime = live_runtime(d, RetryWholeGroup(lambda row: Outcome(1.0)), FakeTrainer(), SleepyService(),
                          log=lambda level, message: logged.append((level, message)))
    run_virtual(runtime.run())
    failures = [m for level, m in logged if level == "warning" and "failed: RuntimeError" in m]
    assert failures and "a rollout's retry stays inside its block" in failures[0]
    assert [e["fate"] for e in runtime.events if e["event"] == "fate"] == ["failed"]


class CancelOneWait(ScriptedWorkflow):
    """Group B holds index 0 on its one permit; its index 1 waits, the wait is cancelled, and index 1 enters again
    (and waits again, for the permit group A gives back at t=3)."""

    runs_rollouts_on_lease = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.notes: list = []

    async def arun_episode(self, row):
        if row.key[1] != 1:
            return await super().arun_episode(row)
        lease = rollout_lease()
        loop = asyncio.get_running_loop()
        release = asyncio.Event()

        async def hold(i):
            async with lease.rollout(i) as waited:
                self.notes.append(("entered", i, loop.time(), waited))
                await release.wait()

        first = asyncio.ensure_future(hold(0))
        waiting = asyncio.ensure_future(hold(1))
        await asyncio.sleep(0.25)
        self.notes.append(("waiting", not waiting.done()))
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        self.notes.append(("cancelled", waiting.cancelled()))
        again = asyncio.ensure_future(hold(1))
        while len(self.notes) < 4:
            await asyncio.sleep(0.25)
        release.set()
        await asyncio.gather(first, again)
        return self.group_output([Rollout(trajectory(row, 0.0)), Rollout(trajectory(row, 1.0))])


def test_a_cancelled_wait_frees_its_index():
    # two permits, groups of two: group B starts at t=1 on the first permit group A gives back (rolling starts)
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, permits=2)
    seconds = {((1, 0), 0): 1.0, ((1, 0), 1): 3.0}
    wf = CancelOneWait(lambda row: Outcome(seconds[(row.key, row.member)], reward=float(row.member)))
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService())
    run_virtual(runtime.run())
    assert wf.notes[0] == ("entered", 0, 1.0, 0.0)
    assert wf.notes[1:3] == [("waiting", True), ("cancelled", True)]
    assert wf.notes[3][:3] == ("entered", 1, 3.0)
    assert wf.notes[3][3] == pytest.approx(3.0 - 1.25)  # it waited from its second entry
    assert [len(s.groups) for s in runtime.trained] == [2]


@pytest.mark.parametrize("release, expected", [("rollout", [3.0, 4.0]), ("group", [3.0, 3.0])])
def test_a_teardown_holds_its_permit_under_rollout_only(release, expected):
    # one group at a time (permits = group size = 2); group A's member 0 ends at t=1 with a 3 s teardown
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, permits=2, permit_release=release)
    script = {((1, 0), 0): Outcome(1.0, teardown_s=3.0), ((1, 0), 1): Outcome(3.0, reward=1.0),
              ((1, 1), 0): Outcome(1.0), ((1, 1), 1): Outcome(1.0, reward=1.0)}
    wf = ScriptedWorkflow(lambda row: script[(row.key, row.member)])
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService())
    run_virtual(runtime.run())
    starts = sorted(t for t, what, key, i in wf.log if what == "start" and key == (1, 1))
    # under rollout A's member 0 gives its permit back when its teardown ends (t=4): B starts on A's member 1's
    # permit at t=3 and runs its second rollout at t=4; under group the teardown holds nothing, and B starts whole
    # when A's workflow returns (t=3)
    assert starts == pytest.approx(expected)


def test_no_lease_clears_the_context_and_tasks_inherit_it():
    async def main():
        seen = []
        token_lease = RolloutLease(host=None)
        assert not token_lease.active
        with no_lease():
            seen.append(rollout_lease().active)

        async def child():
            return rollout_lease().size

        seen.append(await asyncio.ensure_future(child()))
        return seen

    assert run_virtual(main()) == [False, 0]


def test_a_group_run_inside_a_members_rollout_takes_no_permits():
    class Nested(ScriptedWorkflow):
        async def arun_episode_single(self, row):
            inner = GroupRolloutWorkflow.__new__(ScriptedWorkflow)
            ScriptedWorkflow.__init__(inner, lambda r: Outcome(0.5, reward=1.0))
            out = await inner.arun_episode(GroupRow((9, row.member or 0), "inner", None, 5))
            assert len(out.members) == 5  # five rollouts, though the draw's lease has two indices
            return await super().arun_episode_single(row)

    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=1, steps=1, permits=2)
    runtime = live_runtime(d, Nested(lambda row: Outcome(1.0, reward=float(row.member))), FakeTrainer(),
                          SleepyService())
    run_virtual(runtime.run())
    assert [len(s.groups) for s in runtime.trained] == [1]
