"""Datums: advantages (group mean or leave-one-out baseline), verdicts, multi-turn merging, member results, JSON round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platoon.live.training.datums import (
    Trajectory,
    Turn,
    check_datum,
    group_advantages,
    group_datums,
    group_output,
    member_fields,
    step_datums,
    trajectory_datums,
)
from platoon.policy.outputs import GroupOutput, SettledGroup, TrainStep
from platoon.policy.records import GroupRecord
from platoon.policy.stats import MemberResult
from platoon.policy.verdict import group_verdict


def traj(reward: float, success: bool = False, versions=(0,), task_id: str = "t") -> Trajectory:
    """A multi-turn rollout whose context grows by the action and a one-token answer per turn."""
    context = (1, 2)
    turns = []
    for i, v in enumerate(versions):
        turns.append(Turn(context, (10 + i,), (-0.5 - i,), v))
        context = context + (10 + i, 3)
    return Trajectory(task_id, tuple(turns), reward, success)


def test_advantages_are_rewards_minus_the_group_mean_as_in_0_4_0():
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]  # no division by the spread
    assert group_advantages([0.2, 0.5, 1.0]) == pytest.approx([0.2 - 1.7 / 3, 0.5 - 1.7 / 3, 1.0 - 1.7 / 3])
    assert group_advantages([0.3, 0.3, 0.3 + 1e-12]) == [0.0, 0.0, 0.0]
    assert group_advantages([]) == []


def test_a_leave_one_out_baseline_is_the_mean_of_the_others():
    assert group_advantages([1.0, 0.0, 0.0, 1.0], leave_one_out=True) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert group_advantages([0.2, 0.5, 1.0], leave_one_out=True) == pytest.approx([-0.55, -0.1, 0.65])
    assert group_advantages([0.7], leave_one_out=True) == [0.0]  # no other member: centered on itself
    assert group_advantages([0.4, 0.4], leave_one_out=True) == [0.0, 0.0]


@pytest.mark.parametrize("leave_one_out", [False, True])
@given(rewards=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=16))
def test_advantages_sum_to_zero_and_keep_the_order_of_rewards(rewards, leave_one_out):
    adv = group_advantages(rewards, leave_one_out=leave_one_out)
    assert abs(sum(adv)) < 1e-6 * len(rewards)
    for (r1, a1), (r2, a2) in zip(zip(rewards, adv, strict=True), zip(rewards[1:], adv[1:], strict=True),
                                  strict=False):
        if r1 < r2:
            assert a1 <= a2


def test_verdicts():
    def members(*trajectories):
        return [MemberResult(**member_fields(t)) for t in trajectories]

    assert group_verdict(members(traj(1.0, True), traj(0.2))) == "trained"
    assert group_verdict(members(traj(0.2), traj(0.2))) == "uniform"
    assert group_verdict([]) == "no_completed_root"
    # Partial credit: all failed, but rewards differ, so the group trains.
    assert group_verdict(members(traj(0.1), traj(0.4))) == "trained"
    # min_successful_group_size: fewer valid (scored, completed) members than it trains nothing, checked first.
    cut = MemberResult(**member_fields(None, outcome="cancelled", disposition="straggler_killed"))
    assert group_verdict([*members(traj(1.0, True), traj(0.2)), cut], min_successful=3) == "below_min"
    assert group_verdict([*members(traj(1.0, True), traj(0.2)), cut], min_successful=2) == "trained"
    assert group_verdict([cut, cut], min_successful=2) == "below_min"
    assert group_verdict([cut, cut], min_successful=1) == "no_completed_root"


def test_a_multi_turn_rollout_is_one_datum_with_its_actions_masked():
    t = traj(1.0, True, versions=(2, 2, 3))
    (d,) = trajectory_datums(t, 0.7)
    assert d["tokens"] == [1, 2, 10, 3, 11, 3, 12]
    assert d["mask"] == [0, 0, 1, 0, 1, 0, 1]
    assert d["logprobs"] == [0.0, 0.0, -0.5, 0.0, -1.5, 0.0, -2.5]
    assert (d["advantage"], d["version"]) == (0.7, 2)
    check_datum(d)
    assert json.loads(json.dumps(d)) == d


def test_a_turn_whose_prompt_does_not_extend_the_context_starts_a_new_datum():
    t = Trajectory("t", (Turn((1, 2), (5,), (-1.0,), 0), Turn((1, 9), (6, 7), (-2.0, -3.0), 1)), 0.5, False)
    a, b = trajectory_datums(t, -1.0)
    assert (a["tokens"], a["mask"], a["version"]) == ([1, 2, 5], [0, 0, 1], 0)
    assert (b["tokens"], b["mask"], b["logprobs"], b["version"]) == ([1, 9, 6, 7], [0, 0, 1, 1], [0.0, 0.0, -2.0, -3.0], 1)


def test_a_step_s_datums_carry_their_group_s_loss_weight():
    """``step_datums``: each group's advantages times its weight (pass_rate's ``importance_cap``); a step without
    weights trains its datums as they are."""
    outputs = [group_output([traj(1.0, True), traj(0.0)]), group_output([traj(0.5), traj(0.0), traj(1.0)])]
    groups = tuple(SettledGroup((1, i), "t", None, i, out, GroupRecord(1, i, "t", verdict="trained"))
                   for i, out in enumerate(outputs))
    plain = TrainStep(3, 3, groups)
    assert step_datums(plain) == plain.datums
    weighted = step_datums(TrainStep(3, 3, groups, weights=(0.5, 1.5)))
    want = [0.5 * d["advantage"] for d in outputs[0].datums] + [1.5 * d["advantage"] for d in outputs[1].datums]
    assert [d["advantage"] for d in weighted] == pytest.approx(want)
    assert [d["tokens"] for d in weighted] == [d["tokens"] for d in plain.datums]


def test_group_datums_and_output():
    group = [traj(1.0, True, versions=(4,)), traj(0.25, versions=(4, 5)), traj(0.25, versions=(5, 5))]
    datums = group_datums(group)
    assert [d["version"] for d in datums] == [4, 4, 5]
    assert sum(d["advantage"] for d in datums) == pytest.approx(0.0, abs=1e-6)
    out = group_output(group)
    assert isinstance(out, GroupOutput) and out.verdict == "trained" and len(out) == 3
    assert [m.passes(0.5) for m in out.members] == [True, False, False]
    assert out.members[1] == MemberResult(reward=0.25, scored=0.0, valid=True, outcome="scored", steps=2,
                                          output_tokens=2, versions={"main": (4, 5)}, flag=True)
    assert GroupOutput.from_json(json.loads(json.dumps(out.to_json()))).datums == out.datums
    loo = group_output(group, leave_one_out=True)
    assert [d["advantage"] for d in loo.datums] == pytest.approx([0.75, -0.375, -0.375])
    below = group_output(group, min_successful=4)
    assert (below.verdict, below.datums, len(below.members)) == ("below_min", (), 3)


def test_member_fields_of_a_rollout_without_a_result():
    fields = member_fields(None, outcome="cancelled", disposition="straggler_killed")
    m = MemberResult(**fields)
    assert not m.valid and m.reward is None and m.outcome == "cancelled" and not m.passes(0.0)


@pytest.mark.parametrize("change, match", [
    ({"mask": [0, 1]}, "one entry each"),
    ({"mask": [0, 2, 1]}, "only 0 and 1"),
    ({"mask": [1, 0, 1]}, "must be 0"),
    ({"advantage": float("nan")}, "finite"),
])
def test_check_datum(change, match):
    good = {"tokens": [1, 2, 3], "mask": [0, 1, 1], "logprobs": [0.0, -1.0, -1.0], "advantage": 1.0, "version": 0}
    check_datum(good)
    with pytest.raises(ValueError, match=match):
        check_datum(dict(good, **change))
    with pytest.raises(ValueError, match="lacks version"):
        check_datum({k: v for k, v in good.items() if k != "version"})


def test_a_turn_checks_its_lengths():
    with pytest.raises(ValueError, match="log-probabilities"):
        Turn((1,), (2, 3), (-1.0,), 0)
    assert traj(0.0, versions=()).versions is None
