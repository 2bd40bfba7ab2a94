"""Parity: the live runtime and the simulator, fed the same rollout outcomes and completion order, make the same
dispatcher decisions in the same order (the policy layer is shared, not forked).

The simulator runs a config first; its dispatcher is tapped to record, for every rollout, when its permit came, when
its block exited, when its teardown ended, and how it scored (or which rollout raised). The live runtime then runs
the same config on a virtual clock with a workflow whose rollouts replay exactly that, a trainer that takes the
simulator's ``step_s + per_datum_s x datums`` and a model service whose publish takes ``publish_s``. Decisions are
compared kind by kind: the groups started, the permits granted (with the seconds each waited) and the steps taken.
(Across kinds the interleaving of one instant differs by construction: the simulator enters a group's blocks
within the call that started it, the asyncio runtime when the group's task first runs.)

A second check compares the live runtime with ``tests/policy/dispatch_harness.py``'s scripted runtime.
"""

from __future__ import annotations

import asyncio

import pytest
from config_kit import schema_config
from live_harness import (
    AsyncTrainer,
    Outcome,
    ScriptedWorkflow,
    SleepyService,
    dispatch_harness,
    live_runtime,
    run_virtual,
)

from platoon.components import build_policy
from platoon.live.runtime import LiveRuntime
from platoon.policy.dispatcher import StartGroup
from platoon.policy.permits import GrantPermit
from platoon.sim.runtime import SimRuntime
from platoon.sim.setup import build_tasks

HANDLERS = ("start", "on_block_entered", "on_group_entered", "on_block_exited", "on_block_cancelled",
            "on_teardowns_done", "on_group_finished", "publish", "on_deadline", "poll")


def tap(d):
    """Record every decision ``d`` hands out, with the ``now`` of the call, and every call with its arguments."""
    decisions: list = []
    calls: list = []
    for name in HANDLERS:
        fn = getattr(d, name)

        def wrap(*args, _fn=fn, _name=name, **kwargs):
            out = _fn(*args, **kwargs)
            now = kwargs["now"] if "now" in kwargs else args[-1]
            calls.append((_name, args, now))
            decisions.extend((now, x) for x in out)
            return out

        setattr(d, name, wrap)
    take = d.take_step

    def take_step(**kwargs):
        step = take(**kwargs)
        if step is not None:
            decisions.append((kwargs["now"], ("step", step.step, [g.key for g in step.groups],
                                              [g.key for g in step.stale], [g.key for g in step.failed])))
        return step

    d.take_step = take_step
    return decisions, calls


def by_kind(decisions):
    starts = [x for _, x in decisions if isinstance(x, StartGroup)]
    grants = [(x.key, x.index, round(x.waited_s, 6), x.held) for _, x in decisions if isinstance(x, GrantPermit)]
    steps = [x for _, x in decisions if isinstance(x, tuple)]
    return starts, grants, steps


def replay_script(decisions, calls):
    """Each rollout's (seconds, reward, error, teardown) as the simulator played it."""
    granted = {(x.key, x.index): t for t, x in decisions if isinstance(x, GrantPermit)}
    exited: dict = {}
    torn: dict = {}
    reward: dict = {}
    raised: set = set()
    for name, args, now in calls:
        if name == "on_block_exited":
            exited[(args[0], args[1])] = now
        elif name == "on_teardowns_done":
            torn[(args[0], args[1])] = now
        elif name == "on_group_finished":
            key, output = args[0], args[1]
            if output is None:  # the first block to exit at the failure raised; the others were cancelled then
                at_failure = [a for n, a, t in calls if n == "on_block_exited" and a[0] == key and t == now]
                raised.add((key, at_failure[0][1]))
                for k in exited:
                    if k[0] == key and exited[k] < now:
                        reward[k] = 0.0
            else:
                for i, m in enumerate(output.members):
                    if m.disposition == "completed":
                        reward[(key, i)] = m.reward

    def script(row):
        k = (row.key, row.member)
        if k in raised:
            return Outcome(exited[k] - granted[k], error=ValueError("scripted failure"))
        if k not in reward:  # cancelled by its group's failure or cut as a straggler: runs until it is
            return Outcome(1e6)
        return Outcome(exited[k] - granted[k], reward=reward[k],
                       teardown_s=torn[k] - exited[k] if k in torn else 0.0)

    return script, len(raised)


BASE = ["train.max_training_steps=6", "train.batch_size=4", "train.max_staleness=1",
        "environments.0.workflow_config.group_size=4", "train.max_concurrent_rollouts=6",
        "sim.population.tasks=20", "sim.population.heldout=0",
        "sim.rollout.duration={dist: lognormal, median_s: 5.0, sigma: 0.8}",
        "sim.trainer={step_s: 1.0, per_datum_s: 0.01, publish_s: 0.3}"]
SCENARIOS = {
    "teardowns": ["sim.rollout.teardown_s={dist: exponential, mean_s: 0.5}"],
    "errors": ["sim.rollout.error_rate=0.08"],
    "stragglers": ["train.workflow_config.straggler_timeout_seconds=2.0"],
    "stragglers-quorum-2": ["train.workflow_config.straggler_timeout_seconds=2.0", "train.workflow_config.straggler_quorum=2"],
    "informative-pass-rate": ["train.group_admission=informative", "train.task_sampler=pass_rate",
                              "sim.rollout.error_rate=0.05", "sim.rollout.teardown_s={dist: exponential, mean_s: 0.5}"],
    "staleness-0": ["train.max_staleness=0", "sim.rollout.error_rate=0.05"],
    "graded": ["train.group_admission=informative", "train.workflow_config.straggler_timeout_seconds=2.0", "sim.rollout.error_rate=0.05"],
}


class GradedSim(SimRuntime):
    """Graded rewards: a failing member scores 0.0 or 0.25 by its index, a passing one 0.75 or 1.0, so that a group
    whose members all failed (or all passed) can still mix rewards and train."""

    def member_reward(self, g, index, out):
        return (0.75 if out.passed else 0.0) + 0.25 * (index % 2)


@pytest.mark.parametrize("release", ["rollout", "group"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_live_and_simulator_make_the_same_decisions(scenario, release):
    cfg = schema_config(BASE + SCENARIOS[scenario] + [f"train.permit_release={release}"])
    tasks = build_tasks(cfg)
    sim_policy = build_policy(cfg, tasks.pool)
    sim_decisions, sim_calls = tap(sim_policy.dispatcher)
    sim = (GradedSim if scenario == "graded" else SimRuntime)(cfg, tasks, sim_policy)
    sim.begin()
    assert sim.run()
    script, failures = replay_script(sim_decisions, sim_calls)

    live_policy = build_policy(cfg, tasks.pool)
    live_decisions, _ = tap(live_policy.dispatcher)
    trainer_cfg = cfg.sim.trainer
    service = SleepyService(trainer_cfg.publish_s)
    run = cfg.train.workflow_config
    workflow = ScriptedWorkflow(script, service=service, straggler_timeout_s=run.straggler_timeout_seconds,
                                quorum=run.straggler_quorum, warn=lambda message: None)
    trainer = AsyncTrainer(duration=lambda n: trainer_cfg.step_s + trainer_cfg.per_datum_s * n)
    runtime = LiveRuntime(live_policy.driver, workflow, trainer, service, log=lambda level, message: None)
    run_virtual(runtime.run())

    sim_kinds, live_kinds = by_kind(sim_decisions), by_kind(live_decisions)
    assert len(sim_kinds[2]) == cfg.train.max_training_steps
    if scenario in ("errors", "informative-pass-rate"):
        assert failures > 0  # the scenario exercises a group failing
    if scenario == "graded":  # uniform pass/fail groups that trained on their graded rewards
        trained = [c for c in sim_calls if c[0] == "on_group_finished" and c[1][1] is not None
                   and c[1][1].verdict == "trained" and len({m.passes(1.0) for m in c[1][1].members if m.valid}) == 1]
        assert trained
    if scenario.startswith("stragglers") or scenario == "graded":
        assert any(i[1] == "cancelled" for i in workflow.log)  # and cutting stragglers
    for name, sim_part, live_part in zip(("starts", "grants", "steps"), sim_kinds, live_kinds, strict=True):
        assert live_part == sim_part, f"{name} differ"


@pytest.mark.parametrize("release", ["rollout", "group"])
@pytest.mark.parametrize("max_staleness", [0, 1, None])
def test_live_and_the_scripted_harness_make_the_same_decisions(release, max_staleness):
    kwargs = dict(tasks=12, group_size=4, batch_size=4, steps=8, permit_release=release, permits=6,
                  max_staleness=max_staleness)
    d = dispatch_harness.build(**kwargs)
    harness_decisions, _ = tap(d)
    dispatch_harness.Script(d, seed=3, step_s=0.5).run()

    def script(row):
        seconds, passed = dispatch_harness.outcome(3, row.key, row.member, row.task_id)
        return Outcome(seconds, reward=float(passed))

    live = dispatch_harness.build(**kwargs)
    live_decisions, _ = tap(live)
    runtime = live_runtime(live, ScriptedWorkflow(script), AsyncTrainer(duration=lambda n: 0.5), SleepyService())
    run_virtual(runtime.run())
    assert by_kind(live_decisions) == by_kind(harness_decisions)
    assert len(by_kind(live_decisions)[2]) == 8


def test_rollout_and_group_at_max_staleness_0_train_the_same_datums_in_the_same_order():
    """A live run (the tiny model, the batching model service, the GRPO trainer): at max_staleness 0 with the
    default budget (batch_size x group_size permits) the permits never bind, so both settings draw, sample and train
    alike. Tokens, masks, advantages and versions are equal; log-probabilities may differ in their last bits when
    the service's batches are composed differently (floating-point sums), so they are compared to 1e-5."""
    from platoon.live.launch.build import build_live

    trained = {}
    for release in ("rollout", "group"):
        cfg = schema_config(["train.max_training_steps=3", "train.batch_size=4", "train.max_staleness=0",
                                 f"train.permit_release={release}", "environments.0.workflow_config.group_size=4",
                                 "environments.0.service_kwargs={ranges: [4, 8, 16]}"])
        assert cfg.train.max_concurrent_rollouts is None  # the default budget
        live = build_live(cfg)
        steps = []
        train_step = live.trainer.train_step

        def record(datums, *, version, _steps=steps, _train=train_step):
            _steps.append((version, [dict(d) for d in datums]))
            return _train(datums, version=version)

        live.trainer.train_step = record
        runtime = LiveRuntime(live.policy.driver, live.workflow, live.trainer, live.service)
        asyncio.run(runtime.run())
        trained[release] = steps
    rollout, group = trained["rollout"], trained["group"]
    # a step whose advantages are all 0 takes no optimizer step: the next trains from the same version
    assert [v for v, _ in rollout] == [v for v, _ in group] and len(rollout) == 3 and rollout[0][0] == 0
    for (_, a), (_, b) in zip(rollout, group, strict=True):
        assert len(a) == len(b) == 16
        for x, y in zip(a, b, strict=True):
            assert {k: x[k] for k in ("tokens", "mask", "advantage", "version")} == \
                   {k: y[k] for k in ("tokens", "mask", "advantage", "version")}
            assert x["logprobs"] == pytest.approx(y["logprobs"], rel=1e-5, abs=1e-6)
    assert any(d["advantage"] != 0.0 for _, step in rollout for d in step)  # something trained


@pytest.mark.parametrize("release", ["rollout", "group"])
def test_groups_that_all_fail_stop_both_runtimes_at_the_same_group_in_the_same_words(release):
    """Every rollout raises (``sim.rollout.error_rate=1.0``): the simulator reports each failed group to the driver
    as the live runtime reports a workflow that raised (``on_group_finished(error=...)``), so both stop when the
    failure streak breaks (``platoon.policy.failures``), at the same step and group, with one message: the driver's
    ``Abort`` reason, word for word (the live runtime's replay raises the simulator's own ``RolloutRaised``)."""
    from platoon.live.runtime import RuntimeStalled
    from platoon.sim.rollouts import RolloutRaised
    from platoon.sim.runtime import SimulationStalled

    cfg = schema_config(BASE + ["sim.rollout.error_rate=1.0", f"train.permit_release={release}"])
    tasks = build_tasks(cfg)
    sim_policy = build_policy(cfg, tasks.pool)
    sim_decisions, sim_calls = tap(sim_policy.dispatcher)
    sim = SimRuntime(cfg, tasks, sim_policy)
    sim.begin()
    with pytest.raises(SimulationStalled) as sim_stop:
        sim.run()
    replayed, failures = replay_script(sim_decisions, sim_calls)

    def script(row):
        out = replayed(row)
        return out if out.error is None else Outcome(out.seconds, error=RolloutRaised.of(row.member, 1.0))

    live_policy = build_policy(cfg, tasks.pool)
    live_decisions, _ = tap(live_policy.dispatcher)
    trainer_cfg = cfg.sim.trainer
    service = SleepyService(trainer_cfg.publish_s)
    workflow = ScriptedWorkflow(script, service=service, warn=lambda message: None)
    trainer = AsyncTrainer(duration=lambda n: trainer_cfg.step_s + trainer_cfg.per_datum_s * n)
    runtime = LiveRuntime(live_policy.driver, workflow, trainer, service, log=lambda level, message: None)
    with pytest.raises(RuntimeStalled) as live_stop:
        run_virtual(runtime.run())

    limit = max(8, 2 * cfg.train.batch_size)
    assert failures >= limit
    assert str(live_stop.value) == str(sim_stop.value)
    assert str(sim_stop.value).startswith(f"the run stopped at step {sim_policy.driver.steps_done}: its last {limit} "
                                          "groups all failed")
    assert "failed: RolloutRaised: rollout " in str(sim_stop.value)
    assert live_policy.driver.steps_done == sim_policy.driver.steps_done
    assert by_kind(live_decisions)[2] == by_kind(sim_decisions)[2]
