"""A group output's JSON: members as columns, an older release's list of members still read."""

from __future__ import annotations

from platoon.policy.outputs import GroupOutput, member_rows
from platoon.policy.records import MemberResult


def output() -> GroupOutput:
    members = (MemberResult(reward=1.0, scored=1.0, valid=True, outcome="pass", steps=3, seconds=2.5,
                            versions={"main": (4, 5)}),
               MemberResult(reward=None, valid=False, outcome="invalid", disposition="cancelled"))
    return GroupOutput("trained", members, ((1, 2), (3, 4)))


def test_members_are_columns_and_round_trip():
    data = output().to_json()
    assert data["members"]["reward"] == [1.0, None] and data["members"]["versions"] == [{"main": [4, 5]}, {}]
    assert GroupOutput.from_json(data) == output()


def test_an_older_list_of_members_reads_back():
    data = output().to_json()
    older = {**data, "members": [m.to_json() for m in output().members]}
    assert GroupOutput.from_json(older) == output()
    assert member_rows(older["members"]) == member_rows(data["members"])


def test_no_members():
    empty = GroupOutput("uniform")
    assert empty.to_json()["members"] == {} and member_rows({}) == []
    assert GroupOutput.from_json(empty.to_json()) == empty
