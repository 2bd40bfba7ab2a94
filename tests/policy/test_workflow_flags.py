"""The workflow flags: MRO ownership for runs_rollouts_on_lease, nearest declaration for gives_verdicts."""

from __future__ import annotations

import pytest

from platoon.policy.workflow_flags import find_base, gives_verdicts, runs_rollouts_on_lease


class GroupRolloutWorkflow:
    """A stand-in for the live backend's base class: same flags, same three methods."""

    runs_rollouts_on_lease = True
    gives_verdicts = True

    async def arun_episode(self, data):
        return await self._run_group_rollouts(data)

    async def _run_group_rollouts(self, data):
        return [await self._run_group_member(data, i) for i in range(2)]

    async def _run_group_member(self, data, index):
        return index


Base = GroupRolloutWorkflow


def lease(cls: type) -> bool:
    return runs_rollouts_on_lease(cls, base=Base)


def test_base_and_plain_subclass_run_on_the_lease():
    class Plain(Base):
        async def arun_episode_single(self, data):  # not one of the three: no effect
            return 1.0

    assert lease(Base) is True
    assert lease(Plain) is True


@pytest.mark.parametrize("method", ["arun_episode", "_run_group_rollouts", "_run_group_member"])
def test_a_direct_override_reads_false(method):
    Sub = type("Sub", (Base,), {method: lambda self, *a: None})
    assert lease(Sub) is False
    # ...while plain attribute lookup would have said True: the pitfall this rule exists for.
    assert Sub.runs_rollouts_on_lease is True


def test_an_override_through_a_mixin_reads_false():
    class Retry:
        async def arun_episode(self, data):
            return await super().arun_episode(data)

    class Sub(Retry, Base):
        pass

    assert lease(Sub) is False
    assert Sub.runs_rollouts_on_lease is True


def test_a_mixin_after_the_base_overrides_nothing():
    class Late:
        async def arun_episode(self, data):
            return None

    class Sub(Base, Late):  # the MRO finds Base's arun_episode first
        pass

    assert lease(Sub) is True


def test_a_diamond_branch_override_reads_false():
    class Left(Base):
        async def _run_group_member(self, data, index):
            return index

    class Right(Base):
        runs_rollouts_on_lease = True  # re-declared, but Right never saw Left's override

    class Both(Right, Left):
        pass

    assert lease(Left) is False
    assert lease(Right) is True
    assert lease(Both) is False


def test_a_diamond_whose_declarer_owns_the_override_keeps_true():
    class Left(Base):
        async def _run_group_member(self, data, index):
            return index

    class Right(Left):
        runs_rollouts_on_lease = True

    class Both(Right, Left):
        pass

    assert lease(Both) is True


def test_redeclaring_true_covers_non_overriding_subclasses():
    class Own(Base):
        runs_rollouts_on_lease = True

        async def _run_group_rollouts(self, data):
            return []

    class Child(Own):
        async def arun_episode_single(self, data):
            return 0.0

    class Grandchild(Child):
        pass

    class Overrides(Child):
        async def _run_group_rollouts(self, data):
            return [1]

    assert [lease(Own), lease(Child), lease(Grandchild)] == [True, True, True]
    assert lease(Overrides) is False


def test_own_body_wins_whatever_it_says():
    class Off(Base):
        runs_rollouts_on_lease = False

    class OffChild(Off):
        pass

    class OnAgain(Off):
        runs_rollouts_on_lease = True

        async def arun_episode(self, data):
            return None

    assert lease(Off) is False
    assert lease(OffChild) is False
    assert lease(OnAgain) is True


def test_a_class_outside_the_family_reads_its_declaration():
    class Nothing:
        async def arun_episode(self, data):
            return None

    class Declares:
        runs_rollouts_on_lease = True

        async def arun_episode(self, data):
            return None

    class DeclaresChild(Declares):
        pass

    assert lease(Nothing) is False
    assert lease(Declares) is True
    assert lease(DeclaresChild) is True


def test_the_base_is_found_by_name_when_not_given():
    class Sub(Base):
        pass

    class Over(Base):
        async def arun_episode(self, data):
            return None

    assert find_base(Sub) is Base
    assert runs_rollouts_on_lease(Sub) is True
    assert runs_rollouts_on_lease(Over) is False
    assert find_base(int) is None


def test_a_subclass_reusing_the_base_name_is_judged_as_a_subclass():
    class GroupRolloutWorkflow(Base):  # noqa: F811 - the name clash is the point
        async def arun_episode(self, data):
            return None

    assert find_base(GroupRolloutWorkflow) is Base
    assert runs_rollouts_on_lease(GroupRolloutWorkflow) is False


def test_an_instance_attribute_does_not_count():
    wf = Base()
    wf.runs_rollouts_on_lease = False  # instance state is not the class's declaration
    assert lease(type(wf)) is True
    with pytest.raises(TypeError, match="workflow class"):
        runs_rollouts_on_lease(wf)  # type: ignore[arg-type]


def test_a_non_bool_declaration_is_refused():
    class Truthy(Base):
        runs_rollouts_on_lease = 1

    with pytest.raises(TypeError, match=r"Truthy\.runs_rollouts_on_lease must be True or False, got 1"):
        lease(Truthy)


def test_gives_verdicts_by_nearest_declaration():
    class Sub(Base):
        async def arun_episode(self, data):
            return await super().arun_episode(data)

    class Stops(Base):
        gives_verdicts = False

    class StopsChild(Stops):
        pass

    class Own:
        gives_verdicts = True

    class Bare:
        pass

    class Undeclared:
        pass

    class FamilyWithoutFlag(Undeclared):
        pass

    assert gives_verdicts(Base) is True
    assert gives_verdicts(Sub) is True
    assert gives_verdicts(Stops) is False
    assert gives_verdicts(StopsChild) is False
    assert gives_verdicts(Own) is True
    assert gives_verdicts(Bare) is False
    assert gives_verdicts(FamilyWithoutFlag, base=Undeclared) is True
    assert gives_verdicts(Bare, base=Undeclared) is False


def test_gives_verdicts_refuses_a_non_bool():
    class Odd:
        gives_verdicts = "yes"

    with pytest.raises(TypeError, match="gives_verdicts must be True or False"):
        gives_verdicts(Odd)
