"""The driver's checkpoint state round-trips: a twin built the same way and restored from any ``SaveCheckpoint``'s
files (``driver-<name>.json``, ``tasks/dispatch-<name>.json``, the statistics' snapshot), each through JSON, then fed
the same remaining script, answers the same decisions as the run that saved it; the start limit's state
round-trips on its own; and a driver state of another format is refused, naming the format."""

from __future__ import annotations

import copy
import json

import dispatch_harness
import pytest
from driver_model import Runtime, build_driver, overrides
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platoon.policy import Driver, SaveCheckpoint, Schedule, SlotGranted
from platoon.policy.start_limit import StartLimit

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def jsonable(x):
    return json.loads(json.dumps(x))


def normal(dec):
    """A decision as it compares: a checkpoint by its name, row and JSON files (its snapshot holds arrays)."""
    if isinstance(dec, SaveCheckpoint):
        return ("save", dec.name, dec.done, dec.permanent, dec.row,
                {k: v for k, v in dec.files.items() if k.endswith(".json")})
    return dec


def act(rt: Runtime, choice: int) -> None:
    """One event of the script, chosen by ``choice`` among what ``rt`` can do now, in a fixed order: the same
    choice on two runtimes in the same state is the same event."""
    options: list = []
    if rt.pending is not None:
        options.append(("trainer",))
    options += [("enter", k, i) for k, i in rt.members("new")]
    options += [("first_call", k, i) for k, i in rt.members("up")]
    options += [(what, k, i) for k, i in rt.members("up", "run") for what in ("end", "end_td", "raise")]
    options += [("teardowns_done", k, i) for k, i in rt.members("teardown")]
    options += [("late_exit", k, i) for k, i in rt.members("late")]
    options += [("settle", k, how) for k in rt.settleable() for how in ("output", "output", "none", "other")]
    options.append(("deadline",))
    options.append(("tick",))
    what, *args = options[choice % len(options)]
    if what == "trainer":
        rt.now += 0.5
        rt.complete(eval_metrics={"pass_at_1": 0.5}, trainer={"loss": 0.25})
    elif what == "enter":
        rt.enter(*args)
    elif what == "first_call":
        rt.now += 0.5
        rt.first_call(*args)
    elif what in ("end", "end_td"):
        rt.now += 0.5
        rt.end(*args, passed=(args[0][1] + args[1] + choice) % 2 == 0, teardowns=what == "end_td",
               combined=choice % 3 == 0)
    elif what == "raise":
        rt.raise_(*args)
    elif what == "teardowns_done":
        rt.teardowns_done(*args)
    elif what == "late_exit":
        rt.late_exit(*args)
        rt.forget_done()
    elif what == "settle":
        rt.finish_group(*args)
    elif what == "deadline":
        rt.deadline()
    else:
        rt.now += 3.0
        rt.carry([])


KNOBS = st.fixed_dictionaries({
    "steps": st.integers(2, 3), "permits": st.integers(2, 5), "release": st.sampled_from(["rollout", "group"]),
    "staleness": st.sampled_from([None, 0, 1]), "slots": st.sampled_from([None, 1, 2]),
    "eval_every": st.sampled_from([None, 1]), "at_start": st.booleans(), "ck_every": st.sampled_from([None, 1]),
    "recovery": st.sampled_from([None, 1]), "straggler": st.sampled_from([None, 1.0])})


def twin_of(ov: list[str], rt: Runtime, save: SaveCheckpoint) -> Runtime:
    """A runtime and driver built the same way and restored from ``save``'s files (through JSON), as a resume
    restores them (platoon/sim/run.py), its own state a copy of ``rt``'s at the save."""
    layer = build_driver(ov)
    layer.dispatcher.load_state_dict(jsonable(save.files[f"tasks/dispatch-{save.name}.json"]))
    layer.driver.load_state_dict(jsonable(save.files[f"driver-{save.name}.json"]))
    snapshot = save.files[f"tasks/state-{save.name}.npz"]
    layer.recorder.load_snapshot(snapshot)
    layer.recorder.next_seq = int(snapshot["next_seq"])
    twin = Runtime(layer, enter_at_once=rt.enter_at_once, now=rt.now, version=rt.version,
                   groups=copy.deepcopy(rt.groups), final_row=rt.final_row)
    return twin


@FAST
@given(knobs=KNOBS, at_once=st.booleans(), script=st.lists(st.integers(0, 60), min_size=20, max_size=120))
def test_a_twin_restored_at_any_checkpoint_decides_alike(knobs, at_once, script):
    """Restored from each checkpoint of a scripted run (the launch save and every step's), a twin resumes
    (``poll``) and, fed the rest of the script, answers exactly the run's decisions (rows and checkpoints
    included) to the end of the plan."""
    ov = overrides(**knobs)
    rt = Runtime(build_driver(ov), enter_at_once=at_once)
    taken: list = []
    rt.save_hook = lambda save: taken.append((save, copy.deepcopy(rt.groups), rt.now, rt.version, len(rt.trace),
                                              rt.final_row, len(rt.warnings)))
    rt.carry(rt.driver.start(now=0.0))
    twins: list = []
    for choice in [*script, *[0] * 400]:  # the script, then a drain (choice 0: the first option)
        if rt.finished or rt.aborted:
            break
        while len(twins) < len(taken):
            save, groups, now, version, mark, final_row, said = taken[len(twins)]
            shadow = Runtime(rt.layer, enter_at_once=at_once, now=now, version=version, groups=groups,
                             final_row=final_row)
            twin = twin_of(ov, shadow, save)
            twin.carry([])  # the resume: what the restored cycle has due (a publish, or the start)
            twins.append((twin, mark, said))
        for twin, *_ in twins:
            act(twin, choice)
        act(rt, choice)
    assert rt.finished, f"the scripted run did not finish: {rt.aborted}"
    assert len(twins) == len(rt.saves) >= 2  # the launch save and at least the final step's
    rt.outbox()
    for twin, mark, said in twins:
        assert [normal(d) for d in twin.trace] == [normal(d) for d in rt.trace[mark:]]
        assert twin.finished
        twin.outbox()
        assert twin.warnings == rt.warnings[said:]


def test_the_start_limit_state_round_trips_through_json():
    """A start limit with slots held, released, waiting and timed, restored into a fresh one through JSON, equals
    it and answers the same later events."""
    a = StartLimit(2, timer_s=10.0)
    assert a.request((1, 0, 0), now=0.0) and a.request((1, 0, 1), now=0.5)
    assert not a.request((1, 1, 0), now=1.0)
    assert a.release((1, 0, 0), "first_call", now=1.5) == [SlotGranted((1, 1, 0), 0.5)]
    b = StartLimit(2, timer_s=10.0)
    b.load_state_dict(jsonable(a.state_dict()))
    assert b.state_dict() == a.state_dict()
    for limit in (a, b):
        assert limit.waiting() == ()
    assert a.next_deadline() == b.next_deadline() == 10.5  # (1, 0, 1)'s timer: it made no model call
    assert a.on_deadline(now=10.5) == b.on_deadline(now=10.5) == []
    assert a.request((1, 2, 0), now=11.0) == b.request((1, 2, 0), now=11.0)
    assert a.release((1, 1, 0), "end", now=12.0) == b.release((1, 1, 0), "end", now=12.0)
    assert a.metrics(now=13.0) == b.metrics(now=13.0)
    assert a.state_dict() == b.state_dict()


def test_a_driver_state_round_trips_through_json():
    """``Driver.state_dict`` after a started step, loaded into a driver built the same way, gives the same state."""
    ov = overrides(steps=2, permits=3, release="rollout", staleness=1, slots=1, eval_every=None, at_start=False,
                   ck_every=None, recovery=None, straggler=1.0)
    rt = Runtime(build_driver(ov))
    rt.carry(rt.driver.start(now=0.0))
    rt.now = 0.5
    key, i = rt.members("up")[0]
    rt.end(key, i, passed=True, teardowns=False, combined=True)  # a quorum: the straggler deadline is armed
    state = rt.driver.state_dict()
    other = build_driver(ov)
    other.dispatcher.load_state_dict(jsonable(rt.driver.dispatcher.state_dict()))
    other.driver.load_state_dict(jsonable(state))
    assert other.driver.state_dict() == jsonable(state)
    assert other.driver.next_deadline() == rt.driver.next_deadline() == 1.5


@pytest.mark.parametrize("fmt", [1, 3, None, "2"])
def test_a_driver_state_of_another_format_is_refused_naming_it(fmt):
    driver = Driver(dispatch_harness.build(steps=1), schedule=Schedule())
    state = driver.state_dict()
    if fmt is None:
        del state["format"]
    else:
        state["format"] = fmt
    with pytest.raises(ValueError, match=f"driver state format {fmt!r} is not 2"):
        driver.load_state_dict(state)
