"""The asyncio runtime: events and metrics as the dispatcher hands them out, the trainer off the loop, deadlines,
start slots, failures, and the run directory it writes."""

from __future__ import annotations

import asyncio
import threading

import pytest
from live_harness import (
    AsyncTrainer,
    FakeTrainer,
    Outcome,
    ScriptedWorkflow,
    SleepyService,
    dispatch_harness,
    live_runtime,
    run_virtual,
)

from platoon.live.runtime import RuntimeStalled
from platoon.live.training.checkpoint import LiveRunDir
from platoon.policy.assemble import begin_clock
from platoon.policy.driver import Schedule
from platoon.policy.start_limit import StartLimit
from platoon.runs import load_latest_checkpoint, read_checkpoint_rows


def mixed(row):
    return Outcome(1.0 + 0.25 * row.member, reward=float(row.member % 2))


def fates(events):
    return {(e["start"], e["seq"]): e["fate"] for e in events if e["event"] == "fate"}


def test_every_group_is_drawn_settled_and_given_one_fate():
    d = dispatch_harness.build(tasks=8, group_size=3, batch_size=2, steps=5)
    runtime = live_runtime(d, ScriptedWorkflow(mixed), FakeTrainer(), SleepyService())
    run_virtual(runtime.run())
    draws = [(e["start"], e["seq"]) for e in runtime.events if e["event"] == "draw"]
    settles = [(e["start"], e["seq"]) for e in runtime.events if e["event"] == "settle"]
    assert len(draws) == len(set(draws)) == 10
    assert sorted(settles) == sorted(draws)
    assert fates(runtime.events) == dict.fromkeys(draws, "consumed")
    assert [e["event"] for e in runtime.events][0] == "start"
    assert [r["step"] for r in runtime.rows] == [0, 1, 2, 3, 4]
    assert [s.step for s in runtime.trained] == [0, 1, 2, 3, 4]


def test_metrics_rows_carry_the_dispatcher_the_trainer_and_the_batch():
    d = dispatch_harness.build(tasks=8, group_size=4, batch_size=2, steps=3)
    runtime = live_runtime(d, ScriptedWorkflow(mixed), FakeTrainer(), SleepyService(),
                          evaluate=lambda: {"eval/pass@1": 0.25}, schedule=Schedule(eval_every=2, eval_at_start=True))
    run_virtual(runtime.run())
    rows = runtime.rows
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # the last row: the final policy's evaluation
    assert [("eval/pass@1" in r) for r in rows] == [True, False, True, True]
    assert set(rows[3]) == {"step", "time", "eval/pass@1"}
    row = rows[1]
    for key in ("train/dispatch/blocked_share/permits", "rollout_client/permits_held_mean",
                "rollout_client/concurrency_achieved_fraction", "train/policy_version", "trainer/datums",
                "rollout_client/permit_busy_share", "train/trainer_idle_share", "train/reward_mean", "train/pass_rate",
                "train/informative_share", "train/staleness_mean"):
        assert key in row, key
    assert row["train/reward_mean"] == pytest.approx(0.5) and row["train/pass_rate"] == pytest.approx(0.5)
    assert row["train/informative_share"] == 1.0 and row["trainer/datums"] == 8.0
    assert 0.0 < row["rollout_client/permit_busy_share"] <= 1.0


def test_failed_groups_get_their_fate_and_the_run_goes_on():
    def script(row):
        if row.key[1] == 1 and row.member == 2:
            return Outcome(0.5, error=RuntimeError("sandbox died"))
        return mixed(row)

    logged = []
    d = dispatch_harness.build(tasks=8, group_size=3, batch_size=2, steps=3)
    runtime = live_runtime(d, ScriptedWorkflow(script), FakeTrainer(), SleepyService(),
                          log=lambda level, m: logged.append((level, m)))
    run_virtual(runtime.run())
    assert fates(runtime.events)[(1, 1)] == "failed"
    assert any("group (1, 1)" in m and "sandbox died" in m for level, m in logged if level == "warning")
    assert [len(s.failed) for s in runtime.trained] == [1, 0, 0]


def test_a_workflow_that_returns_no_group_output_fails_its_group():
    class Wrong(ScriptedWorkflow):
        async def arun_episode(self, row):
            await super().arun_episode(row)
            return {"not": "an output"}

    logged = []
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=1, steps=1)
    runtime = live_runtime(d, Wrong(mixed), FakeTrainer(), SleepyService(), log=lambda lv, m: logged.append(m))
    run_virtual(runtime.run())
    assert set(fates(runtime.events).values()) == {"failed"}
    assert any("not a GroupOutput" in m for m in logged)


def test_a_teardown_past_the_wait_returns_its_permit_on_the_dispatchers_deadline():
    # one group at a time; member 0's teardown runs 100 s: its permit comes back at 1 + 60 s, with a warning
    script = {0: Outcome(1.0, teardown_s=100.0), 1: Outcome(2.0, reward=1.0)}
    logged = []
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, permits=2)
    wf = ScriptedWorkflow(lambda row: script[row.member] if row.key == (1, 0) else Outcome(100.0, float(row.member)))
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService(), log=lambda lv, m: logged.append((lv, m)))
    run_virtual(runtime.run())
    starts = sorted(t for t, what, key, _ in wf.log if what == "start" and key == (1, 1))
    assert starts == pytest.approx([2.0, 61.0])
    assert any("teardowns still running after 60s" in m for lv, m in logged if lv == "warning")


def test_the_start_limit_lets_one_rollout_start_at_a_time():
    # each rollout's first model call comes 2 s in: with one slot the four members start 2 s apart
    limit = StartLimit(1, timer_s=600.0)
    d = dispatch_harness.build(tasks=4, group_size=4, batch_size=1, steps=1, permits=4)
    wf = ScriptedWorkflow(lambda row: Outcome(5.0, reward=float(row.member % 2), first_call_s=2.0))
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService(), start_limit=limit)
    run_virtual(runtime.run())
    starts = sorted(t for t, what, _, _ in wf.log if what == "start")
    assert starts == pytest.approx([0.0, 2.0, 4.0, 6.0])
    row = runtime.rows[0]
    assert row["rollout_client/start_limit/releases/first_call"] == 4.0
    assert row["rollout_client/start_limit/wait_seconds_max"] == pytest.approx(6.0)


def test_a_stalled_run_raises_instead_of_waiting_forever():
    # a dispatcher whose steps never complete: once its groups have settled nothing runs and nothing is due
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=2)
    d.take_step = lambda *, now: None
    runtime = live_runtime(d, ScriptedWorkflow(mixed), FakeTrainer(), SleepyService())
    with pytest.raises(RuntimeStalled, match="stalled at step 0: no group runs"):
        run_virtual(runtime.run())


def test_a_plain_train_step_runs_off_the_event_loop():
    threads = []

    class ThreadTrainer(FakeTrainer):
        def train_step(self, datums, *, version):
            threads.append(threading.current_thread() is threading.main_thread())
            return super().train_step(datums, version=version)

    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=3)
    runtime = live_runtime(d, ScriptedWorkflow(mixed), ThreadTrainer(), SleepyService())
    run_virtual(runtime.run())
    assert threads == [False, False, False]


@pytest.mark.parametrize("max_staleness, overlap, settles", [
    (1, True, [0.02, 0.02, 0.04, 0.04, 0.34, 0.34]),  # step 1's groups run while step 0 trains (0.02 to 0.32)
    (0, False, [0.02, 0.02, 0.34, 0.34, 0.66, 0.66]),  # each step's groups start once the last one published
])
def test_rollouts_go_on_while_the_trainer_trains_as_far_as_the_horizon_lets_them(max_staleness, overlap, settles):
    """Each step trains 0.3 s (virtual); rollouts of 20 ms settle meanwhile (k=1) or not (k=0, where the horizon is
    full until the step publishes)."""
    windows: list[tuple[float, float]] = []

    class SlowTrainer(AsyncTrainer):
        async def train_step(self, datums, *, version):
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            out = await super().train_step(datums, version=version)
            windows.append((t0, loop.time()))
            return out

    settled: list[float] = []

    class Timed(ScriptedWorkflow):
        async def arun_episode(self, row):
            out = await super().arun_episode(row)
            settled.append(asyncio.get_running_loop().time())
            return out

    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=3, max_staleness=max_staleness)
    runtime = live_runtime(d, Timed(lambda row: Outcome(0.02, reward=float(row.member))),
                          SlowTrainer(duration=lambda n: 0.3), SleepyService())
    run_virtual(runtime.run())
    assert len(windows) == 3 and all(b - a == pytest.approx(0.3) for a, b in windows)
    during = [t for t in settled for a, b in windows if a < t < b]
    assert bool(during) is overlap
    assert settled == pytest.approx(settles)


def test_checkpoints_every_n_steps_and_at_the_end(tmp_path):
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=5)
    run_dir = LiveRunDir.create(tmp_path / "run", config={}, components=[], pool=[])
    runtime = live_runtime(d, ScriptedWorkflow(mixed), FakeTrainer(), SleepyService(), run_dir=run_dir,
                          schedule=Schedule(checkpoint_every=2), trainer_state=lambda: b"weights")
    run_virtual(runtime.run())
    rows = read_checkpoint_rows(tmp_path / "run")
    assert [r["step"] for r in rows] == [0, 2, 4, 5]  # launch, every 2, the end
    assert all(r["permanent"] for r in rows)
    last = load_latest_checkpoint(tmp_path / "run")
    assert last.files["trainer.pt"] == b"weights"
    assert last.row["policy_version"] == 5 and last.row["start"] == 1
    assert set(last.files) == {"tasks/dispatch-000005.json", "tasks/state-000005.npz", "driver-000005.json",
                               "trainer.pt"}
    assert last.row["dispatch"]["sha256"] == last.row["files"]["tasks/dispatch-000005.json"]
    metrics_lines = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    assert last.row["logs"]["metrics.jsonl"] == len(metrics_lines)
    assert "next_position" not in last.row  # only in rule mode


@pytest.mark.parametrize("at_start", [True, False])
def test_step_0_is_evaluated_only_under_eval_at_start(at_start):
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=4)
    runtime = live_runtime(d, ScriptedWorkflow(mixed), FakeTrainer(), SleepyService(),
                           evaluate=lambda: {"eval/pass@1": 0.5},
                           schedule=Schedule(eval_every=2, eval_at_start=at_start))
    run_virtual(runtime.run())
    evaluated = [r["step"] for r in runtime.rows if "eval/pass@1" in r]
    assert evaluated == ([0] if at_start else []) + [2, 4]  # every 2 steps and the final policy either way


def test_recovery_checkpoints_are_pruned_and_permanent_ones_kept(tmp_path):
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=5)
    run_dir = LiveRunDir.create(tmp_path / "run", config={}, components=[], pool=[], keep=1)
    runtime = live_runtime(d, ScriptedWorkflow(mixed), FakeTrainer(), SleepyService(), run_dir=run_dir,
                           schedule=Schedule(checkpoint_every=2, recovery_every=1))
    run_virtual(runtime.run())
    rows = read_checkpoint_rows(tmp_path / "run")
    assert [(r["step"], r["permanent"]) for r in rows] == [(0, True), (1, False), (2, True), (3, False), (4, True),
                                                          (5, True)]
    assert rows[3]["pruned"] == ["000001"]  # keep_recovery 1: step 3 prunes step 1, never a permanent one
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert kept == ["000000", "000002", "000003", "000004", "000005"]


def test_the_trainer_may_be_a_coroutine_and_the_service_publish_too():
    service = SleepyService(publish_s=1.0)
    trainer = AsyncTrainer(duration=lambda n: 2.0)
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=2, max_staleness=0)
    runtime = live_runtime(d, ScriptedWorkflow(lambda row: Outcome(1.0, reward=float(row.member))), trainer, service)
    run_virtual(runtime.run())
    assert service.published == [1, 2]
    # step 0: rollouts 1 s, train 2 s (commit at 3), publish 1 s; step 1 starts at 4 and commits at 7
    assert [r["time"] for r in runtime.rows] == pytest.approx([3.0, 7.0])


def test_a_resumed_start_goes_on_from_its_clock(tmp_path):
    # the run above, begun at 500 s on the run's clock (a resume's checkpoint clock_s): its rows, checkpoints and
    # windows read on from 500, while its rollouts and deadlines run on the loop's clock as before
    service = SleepyService(publish_s=1.0)
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=2, max_staleness=0)
    begin_clock(d, now=500.0)
    run_dir = LiveRunDir.create(tmp_path / "run", config={}, components=[], pool=[])
    runtime = live_runtime(d, ScriptedWorkflow(lambda row: Outcome(1.0, reward=float(row.member))),
                           AsyncTrainer(duration=lambda n: 2.0), service, run_dir=run_dir,
                           schedule=Schedule(checkpoint_every=1),
                           trainer_state=lambda: b"weights", clock_start_s=500.0)
    run_virtual(runtime.run())
    rows = runtime.rows
    assert [r["time"] for r in rows] == pytest.approx([503.0, 507.0])
    assert rows[0]["train/rollouts_per_hour"] == pytest.approx(rows[0]["train/rollouts"] * 3600 / 3.0)
    assert rows[0]["rollout_client/rollouts_in_flight_mean"] == pytest.approx(4 * 1.0 / 3.0)
    # the launch save, then one after each step, each at the run's clock when it was taken
    assert [(r["step"], r["clock_s"]) for r in read_checkpoint_rows(tmp_path / "run")] == \
        [(0, 500.0), (1, 503.0), (2, 507.0)]


def test_a_resumed_starts_deadlines_fire_on_its_clock():
    # the teardown wait of the test above, begun at 500 s: the permit still comes back 60 s after the block's exit
    script = {0: Outcome(1.0, teardown_s=100.0), 1: Outcome(2.0, reward=1.0)}
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, permits=2)
    begin_clock(d, now=500.0)
    wf = ScriptedWorkflow(lambda row: script[row.member] if row.key == (1, 0) else Outcome(100.0, float(row.member)))
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService(), log=lambda lv, m: None, clock_start_s=500.0)
    run_virtual(runtime.run())
    starts = sorted(t for t, what, key, _ in wf.log if what == "start" and key == (1, 1))
    assert starts == pytest.approx([2.0, 61.0])  # on the loop's clock, which this start began at 0
    assert runtime.rows[0]["time"] > 561.0


def test_a_clock_start_before_the_dispatchers_time_is_refused():
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1)
    begin_clock(d, now=500.0)
    runtime = live_runtime(d, ScriptedWorkflow(mixed), FakeTrainer(), SleepyService(), clock_start_s=100.0)
    with pytest.raises(ValueError, match="time went backwards"):
        run_virtual(runtime.run())
