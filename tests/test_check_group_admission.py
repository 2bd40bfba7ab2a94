"""check_group_admission: passes core's rules, and fails usefully for rules that break the contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from platoon._checks.admission import CHECKS, GROUPS, check_group_admission, fixture
from platoon.config import registry
from platoon.policy.admission import Admission, AdmissionCheckContext, AdmissionRule, AdmitAll, Informative
from platoon.policy.stats import VERDICTS

DOC = Path(__file__).resolve().parents[1] / "docs" / "group-admission.md"


def failures(rule, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        check_group_admission(rule, **kwargs)
    return str(info.value)


def failed_checks(message: str) -> list[str]:
    return re.findall(r"^- (\w+):", message, flags=re.M)


# ------------------------------------------------------------------------------------------------ the fixture


def test_the_fixture_covers_every_verdict_and_shape():
    fx = fixture()
    for level in ("run", "entry"):
        groups = fx.groups[level]
        assert len(groups) == GROUPS
        assert {g.verdict for g in groups} == set(VERDICTS)
        assert any(not g.members for g in groups)
        assert any(g.members and not g.valid for g in groups)
        assert any(not g.labels for g in groups)
    assert any(g.entry is None for g in fx.groups["run"])
    assert {g.entry for g in fx.groups["entry"]} == {"a"}
    assert fixture() is fx


# ------------------------------------------------------------------------------------------------ core's rules


def test_core_rules_pass():
    check_group_admission(AdmitAll)
    check_group_admission(Informative, options={"band": [0.2, 0.8]})


def test_a_rule_given_by_reference_is_replayed_under_other_hash_seeds():
    check_group_admission("informative", levels=("entry",))
    check_group_admission("platoon.policy.admission:AdmitAll", levels=("run",), budget_ms=None)


# ------------------------------------------------------------------------------------------------ broken rules


class Stateful(AdmissionRule):
    """Admits every other group it is asked about: its answers depend on how often it was asked."""

    def __init__(self, setup, options):
        super().__init__(setup, options)
        self.calls = 0

    def admit(self, group, stats):
        self.calls += 1
        return Admission(self.calls % 2 == 0, "alternate")


def test_a_stateful_rule_fails_pure_and_says_why():
    message = failures(Stateful, budget_ms=None)
    assert failed_checks(message) == ["pure"]
    assert message.startswith(f"check_group_admission({__name__}:Stateful) failed 1 of 5 checks:")
    # 400 groups asked twice: an alternating rule repeats itself, but not in reverse order, nor once used.
    assert "at run level a second instance asked in reverse order answered differently: 400 of 400" in message
    assert "Admission(False, 'alternate'), then Admission(True, 'alternate')" in message
    assert (
        "at entry level after 10 passes the instance answered unlike a new instance built for each group"
        in message
    )
    assert "keep no state between calls" in message


class FirstSeen(AdmissionRule):
    """Admits a task's first group only, remembering the tasks it saw: a resume would forget them."""

    def __init__(self, setup, options):
        super().__init__(setup, options)
        self.seen = []

    def admit(self, group, stats):
        if group.task_id in self.seen:
            return Admission(False, "seen")
        self.seen.append(group.task_id)
        return True


def test_a_rule_with_memory_fails_when_asked_again():
    message = failures(FirstSeen, levels=("run",), budget_ms=None)
    assert failed_checks(message) == ["pure"]
    assert re.search(
        r"at run level one instance asked about the same groups twice answered differently: \d+ of 400 groups "
        r"differ: group 0 \(task 'a::t00', entry 'a', verdict 'trained'\): Admission\(True, 'admitted'\), then "
        r"Admission\(False, 'seen'\)",
        message,
    )


class ScansPool(AdmissionRule):
    """Builds every task's whole record at each call: fine on 40 tasks, too slow on 4096. (Reading every task's
    counts() is cheap enough now, about 0.6 ms for 4096: the cache of benchmarks/bench_stats_counts.py.)"""

    def admit(self, group, stats):
        groups = sum(stats.task(t).groups for t in stats.task_ids())
        return groups >= 0


def test_a_slow_rule_fails_fast_and_says_what_to_read_instead():
    message = failures(ScansPool, levels=("entry",))
    assert failed_checks(message) == ["fast"]
    assert re.search(
        r"the median of 101 admit calls took [\d.]+ ms on 4096-task statistics, over the budget of 2 ms",
        message,
    )
    assert "instead of scanning the pool" in message
    check_group_admission(ScansPool, levels=("entry",), budget_ms=None)  # nothing else is wrong with it


class HashSeeded(AdmissionRule):
    """Answers by hash(): the same in one process, different after a restart."""

    def admit(self, group, stats):
        return hash(group.task_id) % 2 == 0


def test_a_hash_dependent_rule_fails_the_replay():
    message = failures(f"{__name__}:HashSeeded", levels=("run",), budget_ms=None)
    assert failed_checks(message) == ["pure"]
    assert (
        "PYTHONHASHSEED=0 answered differently" in message
        or "PYTHONHASHSEED=1 answered differently" in message
    )


class Sloppy(AdmissionRule):
    """Raises on groups without members and answers a string for failed ones."""

    def admit(self, group, stats):
        if group.verdict == "failed":
            return "no"
        return group.members[0].valid or True


def test_bad_answers_are_listed_with_their_groups():
    message = failures(Sloppy, levels=("entry",), budget_ms=None)
    assert failed_checks(message) == ["answers"]
    assert re.search(
        r"at entry level \d+ of 400 answers were not an Admission or a bool: group \d+ ", message
    )
    assert "raised IndexError: tuple index out of range" in message
    assert "returned str 'no', not an Admission or a bool" in message


class Loose(AdmissionRule):
    options_schema = dict  # a parsing function that takes anything

    def admit(self, group, stats):
        return True


class NeedsOptions(AdmissionRule):
    def __init__(self, setup, options):
        super().__init__(setup, options)
        if not setup.entries:
            raise KeyError("entries")

    @staticmethod
    def check(options, ctx):
        raise RuntimeError("crashed")

    def admit(self, group, stats):
        return True


class AsyncAdmit:
    async def admit(self, group, stats):
        return True


def test_protocol_and_options_failures():
    message = failures(NeedsOptions, options={"x": 1}, budget_ms=None)
    assert failed_checks(message) == ["options"]
    assert "takes no options" in message
    message = failures(NeedsOptions, budget_ms=None)
    assert failed_checks(message) == ["protocol"]
    assert "Class(setup, options) raised KeyError: 'entries' at run level with no entries" in message
    assert "check(options, ctx) raised RuntimeError: crashed at entry level" in message
    message = failures(AsyncAdmit)
    assert failed_checks(message) == ["protocol"]
    assert "admit must be a plain function, not async" in message
    check_group_admission(Loose, options={"anything": 1}, budget_ms=None)


def test_a_schema_that_takes_unknown_keys_fails_options():
    from pydantic import BaseModel

    class Lax(BaseModel):
        threshold: float = 0.5

    class WithLaxOptions(AdmissionRule):
        options_schema = Lax

        def admit(self, group, stats):
            return True

    message = failures(WithLaxOptions, budget_ms=None)
    assert failed_checks(message) == ["options"]
    assert "accepts an unknown key ('conformance_check_unknown_option')" in message


def test_a_check_that_refuses_is_no_failure_and_every_level_is_still_asked():
    """As in 0.4.0: a ValueError from check is a refusal that says why, which the contract allows."""

    class RunOnly(Stateful):
        @staticmethod
        def check(options, ctx):
            if ctx.level == "entry":
                raise ValueError("run level only")

    message = failures(RunOnly, budget_ms=None)
    assert failed_checks(message) == ["pure"]
    assert "at run level" in message and "at entry level" in message

    class RefusesAll(AdmitAll):
        @staticmethod
        def check(options, ctx):
            raise ValueError("no config")

    check_group_admission(RefusesAll)


def test_a_rule_that_raises_fails_answers_and_fast():
    class Raises(AdmissionRule):
        def admit(self, group, stats):
            raise RuntimeError("boom")

    message = failures(Raises, levels=("run",))
    assert failed_checks(message) == ["answers", "fast"]
    assert "admit raised RuntimeError: boom on 4096-task statistics" in message


def test_a_rule_without_admit_builds_and_fails_when_asked():
    class Forgets(AdmissionRule):
        pass

    Forgets(None)  # options default to None, and the base class is no ABC (as in 0.4.0)
    message = failures(Forgets, levels=("run",), budget_ms=None)
    assert failed_checks(message) == ["answers"] and "NotImplementedError" in message


@pytest.mark.parametrize("levels", [(), ("both",), "run", ("run", "run")])
def test_levels_must_be_a_non_empty_subset(levels):
    with pytest.raises(ValueError, match="levels must be a non-empty subset"):
        check_group_admission(AdmitAll, levels=levels)


def test_checks_are_named_in_order():
    assert CHECKS == ("protocol", "options", "answers", "pure", "fast")


# ------------------------------------------------------------------------------------------------ the guide


def test_the_guide_example_passes_the_check():
    """docs/group-admission.md's example rule, run as written, then checked, refused, and asked."""
    experimental = pytest.importorskip(
        "platoon.experimental", reason="the platoon.experimental facade is not there yet"
    )
    if not all(hasattr(experimental, n) for n in ("Admission", "AdmissionRule", "group_admission")):
        pytest.skip("platoon.experimental does not export the admission API yet")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    example = next(b for b in blocks if "@group_admission" in b)
    namespace: dict = {"__name__": "guide_example"}
    try:
        exec(compile(example, str(DOC), "exec"), namespace)
        cls = registry.lookup("group_admission", "min_valid")
        assert cls is namespace["MinValid"]
        check_group_admission(cls, options={"min_valid": 3})
        # Its check refuses min_valid 5 for the fixture's config; a refusal is no failure of the contract (0.4.0).
        check_group_admission(cls, options={"min_valid": 5}, budget_ms=None)
        fx = fixture()
        ctx = AdmissionCheckContext("run", None, fx.entry_dicts, fx.batch_size, fx.label_column, 3.0, True)
        with pytest.raises(ValueError, match="min_valid: 5 exceeds the smallest group size, 4"):
            cls.check(cls.options_schema(min_valid=5), ctx)
        view = fixture().view
        rule = cls(None, cls.options_schema(min_valid=2))
        mixed = next(g for g in fixture().records if g.verdict == "trained" and g.valid >= 2)
        assert rule.admit(mixed, view) == Admission(True)
    finally:
        registry.unregister("group_admission", "min_valid")
