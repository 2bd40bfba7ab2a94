"""The driver's step cycle at literal times (platoon/policy/cycle.py): the launch save, a step's decisions, the final
evaluation and the end, a resume of a finished run, a stall's Abort, the fates and warnings of odd workflow results
and late blocks, out-of-state events, and the names and nulls of a step's row."""

from __future__ import annotations

import math

import dispatch_harness
import pytest

from platoon.policy import (
    Abort,
    CycleError,
    Driver,
    Evaluate,
    Finish,
    GrantPermit,
    Publish,
    SaveCheckpoint,
    Schedule,
    StartGroup,
    Train,
    WriteRow,
)


def driver(schedule: Schedule | None = None, **kw) -> Driver:
    """A driver over 4 tasks in groups of 2, batches of 2, one step unless told."""
    kw = {"tasks": 4, "group_size": 2, "batch_size": 2, "steps": 1, "max_staleness": 0, **kw}
    return Driver(dispatch_harness.build(**kw), schedule=schedule or Schedule())


def run_groups(d: Driver, starts: list[StartGroup], now: float, *, passes=(True, False)) -> float:
    """Every member of ``starts`` enters, starts at ``now`` and ends 0.5 s later; each group then returns."""
    for s in starts:
        assert d.on_group_entered(s.key, s.group_size, now=now) == [
            GrantPermit(s.key, i, 0.0, True) for i in range(s.group_size)]
        for i in range(s.group_size):
            d.on_member_started(s.key, i, now=now, delay_s=0.0)
    now += 0.5
    for s in starts:
        for i in range(s.group_size):
            assert d.on_member_exited(s.key, i, now=now) == []
        assert d.on_group_finished(s.key, dispatch_harness.output_of(s.task_id, list(passes), s.version),
                                   now=now) == []
    return now


def to_train(d: Driver, now: float = 0.0) -> tuple[Train, float]:
    """Start ``d`` and run its first step's groups: the ``Train`` the next poll answers."""
    (save,) = d.start(now=now)
    assert isinstance(save, SaveCheckpoint)
    starts = d.poll(now=now)
    assert len(starts) == 2 and all(isinstance(s, StartGroup) for s in starts)
    now = run_groups(d, starts, now)
    (train,) = d.poll(now=now)
    assert isinstance(train, Train) and train.step.step == 0
    return train, now


def test_the_launch_save_comes_before_any_start():
    """``start`` answers the launch save alone (done 0, kept for good, its files the dispatch and driver states,
    the driver's cycle recorded as STARTING); only the next poll starts groups."""
    d = driver()
    now = 0.0
    (save,) = d.start(now=now)
    assert isinstance(save, SaveCheckpoint)
    assert (save.name, save.done, save.permanent) == ("000000", 0, True)
    assert {"driver-000000.json", "tasks/dispatch-000000.json"} <= set(save.files)
    assert save.files["driver-000000.json"]["cycle"] == {"state": "starting"}
    assert save.files["tasks/dispatch-000000.json"]["outstanding"] == []
    assert save.row["batch"] == 0 and save.row["policy_version"] == 0 and save.row["runtime"] == "sim"
    starts = d.poll(now=now)
    assert [type(s) for s in starts] == [StartGroup, StartGroup]
    assert d.poll(now=now) == []  # the groups run: nothing is due


def test_a_step_answers_its_row_its_checkpoint_then_its_publish():
    """After ``on_trained`` the next poll answers ``[WriteRow, SaveCheckpoint, Publish]`` (the checkpoint of a
    step that is due, captured with its publish due), in that order; nothing more until ``on_published``."""
    d = driver(Schedule(recovery_every=1), steps=2)
    train, now = to_train(d)
    now += 0.5
    assert d.on_trained(now=now, trainer={"loss": 0.5}) == []
    row, save, publish = d.poll(now=now)
    assert isinstance(row, WriteRow) and row.row["step"] == 0 and row.row["time"] == 1.0
    assert isinstance(save, SaveCheckpoint) and (save.name, save.done, save.permanent) == ("000001", 1, False)
    assert save.files["driver-000001.json"]["cycle"] == {"state": "publish_due"}
    assert publish == Publish(1)
    assert d.poll(now=now) == []


def test_a_step_without_a_checkpoint_due_answers_its_row_then_its_publish():
    d = driver(steps=2)
    _, now = to_train(d)
    now += 0.5
    d.on_trained(now=now)
    row, publish = d.poll(now=now)
    assert isinstance(row, WriteRow) and publish == Publish(1)


def test_the_final_evaluation_then_its_row_then_finish():
    """After the last step's publish: ``Evaluate(steps, final=True)``, then its row
    ``{"step": steps, "time", "eval/..."}`` and ``Finish``."""
    d = driver(Schedule(eval_every=1))
    _, now = to_train(d)
    now += 0.5
    d.on_trained(now=now)
    row, save, publish = d.poll(now=now)  # the final step's checkpoint is always due, kept for good
    assert save.done == 1 and save.permanent and publish == Publish(1)
    assert d.on_published(now=now) == []
    assert d.poll(now=now) == [Evaluate(1, final=True)]
    assert d.poll(now=now) == []
    now += 0.5
    assert d.on_evaluated(now=now, metrics={"pass_at_1": 0.75}) == []
    assert d.poll(now=now) == [WriteRow({"step": 1, "time": 1.5, "eval/pass_at_1": 0.75}), Finish(1, 1)]
    assert d.finished and d.poll(now=now) == []


def test_without_evaluation_the_end_is_finish_alone():
    d = driver()
    _, now = to_train(d)
    d.on_trained(now=now)
    d.poll(now=now)
    d.on_published(now=now)
    assert d.poll(now=now) == [Finish(1, 1)]


@pytest.mark.parametrize(("schedule", "want"), [(Schedule(eval_every=1), [Evaluate(1, final=True)]),
                                               (Schedule(), [Finish(1, 1)])])
def test_a_start_whose_steps_are_all_done_answers_only_the_end(schedule, want):
    """A start whose dispatcher has done every step (restored from a finished run) answers no launch save: the
    final evaluation when evaluation is on, else ``Finish``."""
    done = driver(schedule)
    _, now = to_train(done)
    done.on_trained(now=now)
    done.poll(now=now)
    done.on_published(now=now)
    assert done.dispatcher.step == 1
    again = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, max_staleness=0)
    again.load_state_dict(done.dispatcher.state_dict())
    d = Driver(again, schedule=schedule)
    assert d.start(now=10.0) == want


def stalled() -> Driver:
    """Groups of 2 under ``permit_release: group`` with 1 permit: no group can ever start."""
    return driver(permits=1, permit_release="group", steps=2)


STALL = ("the run stalled at step 0: no group runs and no step can complete (0 settled groups queued, 1 in the "
         "pipeline, 2 steps planned); no group can start: every permit is held")


def test_a_run_that_cannot_progress_aborts_saying_what_blocks_it():
    """Nothing runs, nothing is due and no step can complete: ``Abort`` with a reason naming the blocker."""
    d = stalled()
    d.start(now=0.0)
    answers = [d.poll(now=0.0), d.poll(now=0.0)]
    assert [a for a in answers if a] == [[Abort(STALL)]]


def test_a_stall_at_the_start_is_answered_before_the_polls_run_dry():
    """A runtime polls until a poll answers nothing (platoon/sim/runtime.py ``_carry``): the Abort of a run
    that cannot start must come before that."""
    d = stalled()
    got = d.start(now=0.0)
    while more := d.poll(now=0.0):
        got += more
    assert got[-1] == Abort(STALL)


def test_a_result_that_is_not_a_group_output_fails_the_group_with_a_warning():
    """A workflow that returns something other than a GroupOutput: the group's fate is ``failed`` and the outbox
    warns of it once, naming the group, its task and the type."""
    d = driver()
    d.start(now=0.0)
    first, second = d.poll(now=0.0)
    now = 0.0
    d.on_group_entered(first.key, 2, now=now)
    for i in range(2):
        d.on_member_started(first.key, i, now=now, delay_s=0.0)
    now += 0.5
    for i in range(2):
        d.on_member_exited(first.key, i, now=now)
    d.on_group_finished(first.key, {"reward": 1.0}, now=now)
    box = d.take_outbox()
    assert [w for w in box.warnings if "GroupOutput" in w] == [
        f"the workflow of group {first.key} (task {first.task_id}) returned dict, not a GroupOutput: the group "
        "counts as failed"]
    fates = [e for e in box.events if e["event"] == "fate"]
    assert fates == []  # a failed group's fate is given by the step that takes it
    now = run_groups(d, [second], now)
    (train,) = d.poll(now=now)
    assert [g.key for g in train.step.failed] == [first.key]
    d.on_trained(now=now)
    fates += [e for e in d.take_outbox().events if e["event"] == "fate"]
    assert {(e["seq"], e["fate"]) for e in fates} == {(first.key[1], "failed"), (second.key[1], "consumed")}


def test_a_block_that_enters_after_its_group_finished_runs_on_no_permit_with_one_warning():
    """``on_block_entered`` for a group that has returned: ``GrantPermit(held=False)``, one warning for the group
    however many of its blocks enter late, and its exit answers nothing."""
    d = driver()
    d.start(now=0.0)
    first, _ = d.poll(now=0.0)
    now = 0.5
    assert d.on_block_entered(first.key, 0, now=now) == [GrantPermit(first.key, 0, 0.0, True)]
    d.on_member_started(first.key, 0, now=now, delay_s=0.0)
    d.on_member_exited(first.key, 0, now=now)
    d.on_group_finished(first.key, None, error=RuntimeError("boom"), now=now)
    d.take_outbox()
    now += 0.5
    assert d.on_block_entered(first.key, 1, now=now) == [GrantPermit(first.key, 1, 0.0, False)]
    assert d.on_block_exited(first.key, 1, now=now) == []
    late = [w for w in d.take_outbox().warnings if "after its group's draw was released" in w]
    assert len(late) == 1 and f"(group {first.key})" in late[0]
    assert d.on_block_entered(first.key, 1, now=now) == [GrantPermit(first.key, 1, 0.0, False)]
    assert d.take_outbox().warnings == []


def test_the_late_block_warning_names_the_task():
    d = driver()
    d.start(now=0.0)
    first, _ = d.poll(now=0.0)
    d.on_group_finished(first.key, None, cancelled=True, now=0.5)
    d.take_outbox()
    d.on_block_entered(first.key, 0, now=1.0)
    (late,) = d.take_outbox().warnings
    assert late.startswith(f"a rollout of task {first.task_id} (group {first.key})")


@pytest.mark.parametrize(("event", "state"), [("on_trained", "waiting"), ("on_evaluated", "waiting"),
                                              ("on_published", "waiting"), ("start", "waiting")])
def test_a_cycle_event_in_the_wrong_state_raises_naming_both(event, state):
    d = driver()
    d.start(now=0.0)
    d.poll(now=0.0)
    with pytest.raises(CycleError, match=f"^{event} in cycle state {state}$"):
        getattr(d, event)(now=0.5)
    assert d.cycle.state.value == state  # and nothing changed


def test_a_cycle_event_before_the_start_raises():
    d = driver()
    with pytest.raises(CycleError, match="^on_trained in cycle state launching$"):
        d.on_trained(now=0.0)


def test_on_evaluated_while_training_raises():
    d = driver(Schedule(eval_every=1))
    _, now = to_train(d)
    with pytest.raises(CycleError, match="^on_evaluated in cycle state training$"):
        d.on_evaluated(now=now, metrics={"pass_at_1": 1.0})


def test_a_non_finite_trainer_metric_is_written_as_null():
    """NaN and inf among the trainer's metrics are written as None; a finite one as it is."""
    d = driver(steps=2)
    _, now = to_train(d)
    d.on_trained(now=now, trainer={"loss": math.nan, "grad_norm": math.inf, "lr": 0.001})
    row, _ = d.poll(now=now)
    assert row.row["trainer/loss"] is None and row.row["trainer/grad_norm"] is None
    assert row.row["trainer/lr"] == 0.001


def test_trainer_metrics_are_prefixed_trainer_and_eval_metrics_eval():
    """The trainer's metrics are named ``trainer/...``; the step's evaluation's ``eval/...`` (a name that carries
    the prefix already keeps it); the runtime's own are named as they are."""
    d = driver(Schedule(eval_at_start=True), steps=2)
    d.start(now=0.0)
    starts = d.poll(now=0.0)
    now = run_groups(d, starts, 0.0)
    assert d.poll(now=now) == [Evaluate(0)]
    assert d.on_evaluated(now=now, metrics={"pass_at_1": 0.5, "eval/n": 4}) == []
    (train,) = d.poll(now=now)
    assert isinstance(train, Train)
    d.on_trained(now=now, trainer={"loss": 0.25}, runtime={"sim/busy": 1.0})
    row, _ = d.poll(now=now)
    named = {k: v for k, v in row.row.items() if k.split("/")[0] in ("trainer", "eval", "sim")}
    assert named == {"trainer/loss": 0.25, "eval/pass_at_1": 0.5, "eval/n": 4, "sim/busy": 1.0}
    assert "loss" not in row.row and "pass_at_1" not in row.row
