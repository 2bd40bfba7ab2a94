"""Literal-time unit tests of the dispatcher's rules (docs/group-admission.md, docs/dispatch.md)."""

import pytest
from config_kit import schema_config
from dispatch_harness import Script, build, output_of

from platoon.policy.dispatch_records import dispatch_config
from platoon.policy.dispatcher import StartGroup, StepPhase
from platoon.policy.permits import GrantPermit


def starts(decisions):
    return [d for d in decisions if isinstance(d, StartGroup)]


def grants(decisions):
    return [d for d in decisions if isinstance(d, GrantPermit)]


def enter_all(d, start, now):
    out = []
    for i in range(start.group_size):
        out += d.on_block_entered(start.key, i, now=now)
    return out


def test_horizon_bounds_groups_drawn_ahead_of_the_trainer():
    d = build(batch_size=4, steps=10, max_staleness=1, permits=1000)
    assert len(starts(d.start(now=0.0))) == 8  # (k + 1) * B
    d = build(batch_size=4, steps=10, max_staleness=0, permits=1000)
    assert len(starts(d.start(now=0.0))) == 4
    d = build(batch_size=4, steps=10, max_staleness=None, permits=1000)
    assert len(starts(d.start(now=0.0))) == 40  # only the plan bounds drawing ahead


def test_plan_bound_draws_no_more_than_the_remaining_steps_need():
    d = build(batch_size=4, steps=1, max_staleness=None, permits=1000)
    assert len(starts(d.start(now=0.0))) == 4
    assert d.gauges.blocked.reason == "plan"


def test_rolling_start_begins_a_group_on_its_first_free_permit():
    d = build(batch_size=2, group_size=4, permits=5, max_staleness=None, steps=5)
    first = starts(d.start(now=0.0))
    assert len(first) == 2  # the second group starts on the fifth permit
    g0, g1 = first
    assert len(grants(enter_all(d, g0, 0.0))) == 4
    assert [x.index for x in grants(enter_all(d, g1, 0.0))] == [0]
    out = d.on_block_exited(g0.key, 2, now=1.5)
    assert out == [GrantPermit(g1.key, 1, 1.5, True)]
    assert d.permits.held == 5


def test_group_release_holds_every_permit_until_the_workflow_returns():
    d = build(batch_size=2, group_size=4, permits=5, max_staleness=None, steps=5, permit_release="group")
    first = starts(d.start(now=0.0))
    assert len(first) == 1
    (g0,) = first
    assert all(not g.held for g in grants(enter_all(d, g0, 0.0)))
    for i in range(4):
        assert d.on_block_exited(g0.key, i, now=1.0 + i) == []
    out = d.on_group_finished(g0.key, output_of(g0.task_id, [True, False, True, False], 0), now=4.0)
    assert len(starts(out)) == 1 and d.permits.held == 4


def test_a_step_trains_the_first_batch_in_draw_order_and_drops_stale_groups():
    d = build(batch_size=2, group_size=2, permits=100, max_staleness=0, steps=3)
    g = starts(d.start(now=0.0))
    for s in g:
        enter_all(d, s, 0.0)
    # the second group settles first: the step still lists them in draw order
    for s, t in ((g[1], 1.0), (g[0], 2.0)):
        for i in range(2):
            d.on_block_exited(s.key, i, now=t)
        d.on_group_finished(s.key, output_of(s.task_id, [True, False], 0), now=t)
    step = d.take_step(now=2.0)
    assert [x.key for x in step.groups] == [g[0].key, g[1].key]
    assert d.phase is StepPhase.TRAINING
    with pytest.raises(RuntimeError, match="take_step: the dispatcher is training, not assembling"):
        d.take_step(now=2.0)


def test_stale_groups_are_dropped_at_dequeue():
    # the run draws without a horizon, the entry's own bound is 0: a slow group drawn at version 0 that a step
    # dequeues after the first publish is stale
    d = build(batch_size=1, group_size=2, permits=100, max_staleness=None, steps=3, entry_staleness={"env": 0})
    s = Script(d, step_s=0.1, duration=lambda key, i, task: 0.05 + 10.0 * key[1]).run()
    stale = [g.key for st in s.steps for g in st.stale]
    assert stale, "groups drawn at version 0 and dequeued at version >= 1 must be stale under a bound of 0"
    fates = [e for e in s.d.take_events() if e["event"] == "fate"]
    assert {e["fate"] for e in fates} >= {"consumed", "stale"}


def test_time_never_goes_backwards():
    d = build()
    d.start(now=5.0)
    with pytest.raises(ValueError, match="time went backwards"):
        d.take_step(now=4.0)


def test_teardowns_hold_the_permit_until_done_or_the_deadline():
    d = build(batch_size=1, group_size=2, permits=2, max_staleness=None, steps=4)
    (g0,) = starts(d.start(now=0.0))
    enter_all(d, g0, 0.0)
    assert d.on_block_exited(g0.key, 0, now=1.0, teardowns_pending=True) == []
    assert d.next_deadline() == 61.0 and d.permits.held == 2
    (g1,) = starts(d.on_teardowns_done(g0.key, 0, now=2.0))  # the permit came back: the next group starts on it
    assert d.next_deadline() is None
    assert d.on_block_exited(g0.key, 1, now=3.0, teardowns_pending=True) == []
    assert d.on_deadline(now=62.0) == []
    out = d.on_deadline(now=63.0)
    assert [g.key for g in grants(out)] == [] and d.running[g1.key][1].granted == 2
    assert any("teardowns still running after 60s" in w for w in d.take_warnings())
    assert d.next_deadline() is None


def test_informative_rejects_uniform_groups_and_frees_their_place_at_once():
    d = build(batch_size=2, group_size=2, permits=100, max_staleness=0, steps=2, admission="informative",
              max_groups_per_step=2.0)
    g = starts(d.start(now=0.0))
    assert len(g) == 2
    for s in g:
        enter_all(d, s, 0.0)
    for s in g:
        for i in range(2):
            d.on_block_exited(s.key, i, now=1.0)
    out = d.on_group_finished(g[0].key, output_of(g[0].task_id, [True, True], 0), now=1.0)
    # rejected with datums: its horizon place is free at once, so another group starts while the step waits
    assert len(starts(out)) == 1
    fate = [e for e in d.take_events() if e["event"] == "fate"]
    assert fate == [{"event": "fate", "start": 1, "seq": 0, "fate": "rejected", "rule": "informative",
                     "admission": "uniform_pass"}]
    d.on_group_finished(g[1].key, output_of(g[1].task_id, [True, False], 0), now=1.0)
    assert d.take_step(now=1.0) is None  # one admitted, two counted: neither B admitted nor the cap (4)


def test_step_closes_at_the_cap_training_what_it_admitted():
    d = build(batch_size=2, group_size=2, permits=100, max_staleness=0, steps=2, admission="informative",
              max_groups_per_step=1.5)
    assert d.cap == 3
    script = Script(d)
    script.carry_out(d.start(now=0.0), 0.0)
    # settle everything as uniform: every group is rejected, the step closes once it counted 3
    for _ in range(10):
        keys = list(d.running)
        if not keys:
            break
        for key in keys:
            draw, _ = d.running[key]
            for i in range(draw.group_size):
                d.on_block_exited(key, i, now=1.0)
            script.carry_out(d.on_group_finished(key, output_of(draw.task_id, [False, False], 0), now=1.0), 1.0)
    step = d.take_step(now=1.0)
    assert step is not None and step.groups == () and len(step.markers) == 3


def test_censoring_metrics_compare_the_slowest_valid_member_with_the_others():
    from platoon.policy.dispatch_metrics import censoring_metrics
    from platoon.policy.outputs import SettledGroup
    from platoon.policy.stats import GroupRecord, MemberResult

    def member(passed, seconds, disposition="completed"):
        valid = disposition == "completed"
        return MemberResult(reward=float(passed), scored=float(passed) if valid else None, valid=valid,
                            outcome="scored" if valid else "cancelled", disposition=disposition, seconds=seconds)

    mixed = (member(True, 1.0), member(False, 2.0), member(True, 9.0), member(False, None, "straggler_killed"))
    uniform = (member(True, 1.0), member(True, 2.0))
    items = [SettledGroup((1, i), "t", "env", i, None, GroupRecord(1, i, "t", "env", members=ms, verdict="trained"))
             for i, ms in enumerate((mixed, uniform))]
    m = censoring_metrics(items, lambda entry: 1.0)
    assert m["train/batch/censoring/censored_share"] == 1 / 6
    assert m["train/batch/censoring/mixed_groups"] == 1
    assert m["train/batch/censoring/slowest_pass_rate"] == 1.0  # the 9 s member passed
    assert m["train/batch/censoring/others_pass_rate"] == 0.5
    assert m["train/batch/environment/env/censoring/mixed_groups"] == 1


def test_the_start_event_names_the_checkpoint_a_resume_loaded():
    d = build()
    d.start(now=0.0, checkpoint="000010")
    (event,) = [e for e in d.take_events() if e["event"] == "start"]
    assert event == {"event": "start", "start": 1, "batch": 0, "checkpoint": "000010", "state_lost": None,
                     "loaded": "000010"}


def settle_all(d, script, passes, now):
    """Settle every running group, each member passing as ``passes(task_id)`` says; the decisions carried out."""
    for key in list(d.running):
        draw, _ = d.running[key]
        for i in range(draw.group_size):
            d.on_block_exited(key, i, now=now)
        out = output_of(draw.task_id, passes(draw.task_id), d.version)
        script.carry_out(d.on_group_finished(key, out, now=now), now)


def test_a_step_that_admits_nothing_keeps_the_version_and_warns_once():
    d = build(batch_size=2, group_size=2, permits=100, max_staleness=1, steps=4, admission="informative",
              max_groups_per_step=1.5)
    script = Script(d)
    script.carry_out(d.start(now=0.0), 0.0)
    for now in (1.0, 2.0, 3.0):  # every group uniform: rejected
        if d.take_step(now=now) is not None:
            break
        settle_all(d, script, lambda task: [False, False], now)
    else:
        raise AssertionError("the step never closed at its cap")
    assert d.phase is StepPhase.TRAINING and d.next_version == 0
    d.commit_step(now=now)
    [warning] = d.take_warnings()
    assert warning.startswith("step 0 admitted none of the 3 groups it counted (3 rejected, 0 stale, 0 failed): "
                              "it takes no optimizer update, and the policy version stays 0; raise "
                              "train.refill.max_groups_per_step")
    d.step_metrics(now=now)
    script.carry_out(d.publish(now=now), now)
    assert (d.step, d.version) == (1, 0)  # a step, but no update: what runs has not aged
    since = len(script.trace)
    while d.take_step(now=now) is None:  # the next step admits nothing either: no second warning
        now += 1.0
        settle_all(d, script, lambda task: [True, True], now)
    assert starts(script.trace[since:]) and all(g.version == 0 for g in starts(script.trace[since:]))
    d.commit_step(now=now)
    assert d.take_warnings() == []
    d.step_metrics(now=now)
    d.publish(now=now)
    assert (d.step, d.version) == (2, 0)


@pytest.mark.parametrize("uniform_groups_update", [False, True])
@pytest.mark.parametrize("passes", [[True, True], [False, False], [True, False]])
def test_a_step_of_only_uniform_groups_keeps_the_version_unless_the_loss_trains_them(uniform_groups_update, passes):
    # 0.4.0's rule: every advantage 0 is a zero objective (no optimizer update), unless the loss has a term that does
    # not depend on the advantage (kl_coef, entropy_coef: DispatchConfig.uniform_groups_update).
    d = build(batch_size=2, group_size=2, permits=100, max_staleness=None, steps=2,
              uniform_groups_update=uniform_groups_update)
    script = Script(d)
    script.carry_out(d.start(now=0.0), 0.0)
    while (step := d.take_step(now=1.0)) is None:
        settle_all(d, script, lambda task: passes, 1.0)
    assert len(step.groups) == 2
    d.commit_step(now=1.0)
    d.step_metrics(now=1.0)
    script.carry_out(d.publish(now=1.0), 1.0)
    assert d.version == (1 if uniform_groups_update or passes == [True, False] else 0)


def test_dispatch_config_reads_the_loss():
    assert dispatch_config(schema_config([]), steps=10).uniform_groups_update is False
    cfg = schema_config(["train.loss_fn_config.entropy_coef=0.01"])
    assert dispatch_config(cfg, steps=10).uniform_groups_update is True


def test_a_short_step_warns_once_and_its_update_moves_the_version():
    d = build(batch_size=2, group_size=2, permits=100, max_staleness=1, steps=4, admission="informative",
              max_groups_per_step=1.5)
    script = Script(d)
    script.carry_out(d.start(now=0.0), 0.0)
    mixed = {d.running[k][0].task_id for k in list(d.running)[:1]}  # one mixed group, the others uniform
    now = 1.0
    while d.take_step(now=now) is None:
        settle_all(d, script, lambda task: [True, False] if task in mixed else [False, False], now)
        now += 1.0
    d.commit_step(now=now)
    [warning] = d.take_warnings()
    assert warning.startswith("step 0 admitted 1 of 2 groups before it counted its cap of 3 (2 rejected, 0 stale, "
                              "0 failed): it trains on fewer groups than train.batch_size")
    assert d.next_version == 1
    d.step_metrics(now=now)
    d.publish(now=now)
    assert (d.step, d.version) == (1, 1)


def test_a_failing_environment_is_named_when_more_groups_fail_than_are_rejected():
    from platoon.policy.dispatch_metrics import short_step_warning
    from platoon.policy.outputs import SettledGroup, SettledKind
    from platoon.policy.stats import GroupRecord

    def item(kind, output):
        return SettledGroup((1, 0), "t", "env", 0, output, GroupRecord(1, 0, "t", "env"), kind)

    failed = [item(SettledKind.MARKER, None), item(SettledKind.MARKER, None), item(SettledKind.FAILED, None)]
    kind, message = short_step_warning(failed, step=3, admitted=0, counted=3, batch_size=2, version=2)
    assert kind == "empty" and "(0 rejected, 0 stale, 3 failed)" in message and "look at the environment" in message
    assert short_step_warning(failed, step=3, admitted=2, counted=5, batch_size=2, version=2) is None


def test_the_checkpoint_and_a_resume_keep_the_version_of_a_step_that_trained_nothing():
    import json

    from platoon.policy.cycle import Train
    from platoon.policy.dispatch_state import resume
    from platoon.policy.driver import Driver, Schedule

    d = build(batch_size=2, group_size=2, permits=100, max_staleness=1, steps=4, admission="informative",
              max_groups_per_step=1.5)
    driver, script = Driver(d, schedule=Schedule(recovery_every=1)), Script(d)
    driver.start(now=0.0)  # the launch save
    script.carry_out(driver.poll(now=0.0), 0.0)
    now = 1.0
    answered: list = []
    while not any(isinstance(x, Train) for x in answered):
        for key in list(d.running):  # every running group settles, failing every rollout
            draw, _ = d.running[key]
            for i in range(draw.group_size):
                d.on_block_exited(key, i, now=now)
            out = output_of(draw.task_id, [False, False], d.version)
            script.carry_out(driver.on_group_finished(key, out, now=now), now)
        answered = driver.poll(now=now) + driver.poll(now=now)
        now += 1.0
    driver.on_trained(now=now)
    row_, save, publish = driver.poll(now=now)
    assert (save.done, publish.version) == (1, 0)
    files, row = save.files, save.row
    assert (row["batch"], row["policy_version"]) == (1, 0)
    state = json.loads(json.dumps(files["tasks/dispatch-000001.json"]))
    assert state["policy_version"] == 0
    again = build(batch_size=2, group_size=2, permits=100, max_staleness=1, steps=4, admission="informative",
                  max_groups_per_step=1.5, start=2)
    again.recorder.load_snapshot(files["tasks/state-000001.npz"])
    resume(again, state, step=1)
    assert (again.step, again.version) == (1, 0)


def test_the_stale_warning_names_what_held_the_dispatcher_back_and_closes_on_the_bias():
    from platoon.policy.dispatch_metrics import StaleWatch

    watch = StaleWatch()
    blocked = {"permits": 0.5, "horizon": 0.25, "labels": 0.0, "plan": 0.0, "sampler": 0.0}
    said = [watch.note_step(10, 1, blocked, 1) for _ in range(10)]
    assert said[:9] == [None] * 9  # from the 10th step on
    assert said[9] == (
        "10.0% of the groups the last 10 steps consumed went stale (10 of 100); what held the dispatcher back most "
        "was permits (50% of the time); the horizon held rollouts back, so a larger train.max_staleness also lets "
        "them run further ahead, which can make more of them stale, not fewer: compare before you change it, e.g. "
        "platoon simulate --like RUN --sweep train.max_staleness=1,2,3. A stale filter per datum, which would drop "
        "only a group's stale datums, is planned; until then dropping long groups biases what trains toward short "
        "rollouts.")
    roomy = StaleWatch()
    room = {**blocked, "horizon": 0.0}
    said = [roomy.note_step(10, 1, room, 1) for _ in range(10)][9]
    assert "the horizon had room, so train.max_staleness: 2 changes only the stale filter and keeps these groups" in said
    assert watch.note_step(10, 10, blocked, 1) is None  # once per start
