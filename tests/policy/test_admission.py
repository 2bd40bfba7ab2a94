"""Group admission: the built-in rules, answer validation and failing open, resolution, and AdmissionSet."""

from __future__ import annotations

import inspect

import pytest

from platoon.components import admission_set as build_admission_set
from platoon.components import parse_rule_options, resolve_group_admission
from platoon.config import registry
from platoon.config.components import InformativeOptions
from platoon.config.errors import ConfigError, ExtensionError
from platoon.policy.admission import (
    Admission,
    AdmissionRule,
    AdmissionSet,
    AdmissionSetup,
    AdmitAll,
    Informative,
    accept_answer,
    carries_datums,
    step_cap,
)
from platoon.policy.samplers.base import TaskStatsView
from platoon.policy.stats import GroupRecord, MemberResult, TaskStatsStore

TASKS = [("a0", "a", "x"), ("a1", "a", "w"), ("b0", "b", "y")]


def view() -> TaskStatsView:
    # Entry b passes at 0.5, so a score of 0.5 passes there and fails in a.
    return TaskStatsView(TaskStatsStore(TASKS, {"a": (4, 1.0), "b": (4, 0.5)}, column="label"), 4.0)


def member(scored: float | None, valid: bool = True) -> MemberResult:
    return MemberResult(reward=scored, scored=scored, valid=valid, outcome="scored" if valid else "invalid")


def group(verdict: str, scores=(1.0, 0.0), *, task: str = "a0", entry: str | None = "a", invalid: int = 0):
    members = tuple(member(s) for s in scores) + tuple(member(None, valid=False) for _ in range(invalid))
    return GroupRecord(start=1, seq=0, task_id=task, entry=entry, members=members, verdict=verdict)


def informative(band=None) -> Informative:
    setup = AdmissionSetup("informative", "run", None, {}, 8)
    return Informative(setup, InformativeOptions(band=band))


def admission_set(run="informative", run_options=None, entry_rules=None, entries=("a", "b"), batch_size=2):
    entry_rules = entry_rules if entry_rules is not None else {e: (None, {}) for e in entries}
    return build_admission_set(
        run_rule=run,
        run_options=run_options or {},
        entry_rules=entry_rules,
        entries={e: None for e in entries},
        batch_size=batch_size,
        label_column="label",
    )


# ------------------------------------------------------------------------------------------------ the verdict


def test_admission_reason_defaults_by_admit():
    assert Admission(True) == Admission(True, "admitted")
    assert Admission(False) == Admission(False, "rejected")
    assert Admission(False, "too_long").reason == "too_long"


# ---------------------------------------------------------------------------------------------- the built-ins


def test_all_admits_everything():
    rule = AdmitAll(AdmissionSetup("all", "run", None, {}, 8), None)
    for verdict in ("trained", "uniform", "failed", "unknown", "no_datums"):
        assert rule.admit(group(verdict), view()) == Admission(True, "admitted")


@pytest.mark.parametrize(
    ("scores", "entry", "task", "reason"),
    [
        ((1.0, 1.0), "a", "a0", "uniform_pass"),
        ((0.0, 0.0), "a", "a0", "uniform_fail"),
        ((1.0, 0.0), "a", "a0", "uniform_mixed"),  # a uniform verdict over mixed scores
        ((0.5, 0.5), "a", "a0", "uniform_fail"),  # 0.5 fails at a's threshold 1.0 ...
        ((0.5, 0.5), "b", "b0", "uniform_pass"),  # ... and passes at b's 0.5
        ((), "a", "a0", "uniform_mixed"),  # no valid member
    ],
)
def test_informative_rejects_uniform_groups_by_kind(scores, entry, task, reason):
    assert informative().admit(group("uniform", scores, entry=entry, task=task), view()) == Admission(
        False, reason
    )


@pytest.mark.parametrize(
    "verdict", ["reward_key_mismatch", "no_results", "below_min", "no_completed_root", "no_datums", "failed"]
)
def test_informative_rejects_verdicts_that_train_nothing(verdict):
    assert informative(band=(0.1, 0.9)).admit(group(verdict), view()) == Admission(False, verdict)


def test_informative_admits_trained_and_unknown_verdicts():
    assert informative().admit(group("trained"), view()) == Admission(True, "admitted")
    # A trained group can be all-pass by success; only a band rejects it.
    assert informative().admit(group("trained", (1.0, 1.0)), view()) == Admission(True, "admitted")
    assert informative().admit(group("unknown"), view()) == Admission(True, "unknown")
    assert informative().admit(group("my_own_verdict"), view()) == Admission(True, "unknown")


def test_informative_band_edges_are_admitted():
    rule = informative(band=(0.25, 0.75))
    four = lambda passes: group("trained", (1.0,) * passes + (0.0,) * (4 - passes), invalid=2)  # noqa: E731
    assert rule.admit(four(0), view()) == Admission(False, "below_band")
    assert rule.admit(four(1), view()) == Admission(True, "admitted")  # 0.25, the low edge
    assert rule.admit(four(2), view()) == Admission(True, "admitted")
    assert rule.admit(four(3), view()) == Admission(True, "admitted")  # 0.75, the high edge
    assert rule.admit(four(4), view()) == Admission(False, "above_band")
    # No valid member: the band has nothing to judge.
    assert rule.admit(group("trained", (), invalid=3), view()) == Admission(True, "admitted")
    # The band reads the entry's threshold: 0.5 passes in b.
    assert rule.admit(group("trained", (0.5, 0.5), entry="b", task="b0"), view()) == Admission(
        False, "above_band"
    )


def test_informative_band_options_are_checked():
    with pytest.raises(
        ValueError, match=r"band: must be two numbers lo < hi between 0 and 1, got \[0\.9, 0\.1\]"
    ):
        parse_rule_options(Informative, {"band": [0.9, 0.1]}, key="train.group_admission_options", name="x")
    with pytest.raises(
        ValueError, match=r"train\.group_admission_options\.bnad: unknown option; did you mean 'band'"
    ):
        parse_rule_options(Informative, {"bnad": [0.1, 0.9]}, key="train.group_admission_options", name="x")
    with pytest.raises(
        ValueError,
        match=r"^train\.group_admission_options: 'all' takes no options; leave group_admission_options out$",
    ):
        parse_rule_options(AdmitAll, {"band": [0.1, 0.9]}, key="train.group_admission_options", name="all")
    parsed = parse_rule_options(Informative, {"band": [0, 1]}, key="k", name="informative")
    assert parsed.band == (0.0, 1.0)


# -------------------------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (True, Admission(True, "admitted")),
        (False, Admission(False, "rejected")),
        (Admission(False, "x" * 64), Admission(False, "x" * 64)),
    ],
)
def test_valid_answers(answer, expected):
    assert accept_answer(answer) == (expected, "")


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (1, "returned int 1, not an Admission or a bool"),
        (None, "returned NoneType None, not an Admission or a bool"),
        ("yes", "returned str 'yes', not an Admission or a bool"),
        (Admission(1, "ok"), "whose admit is not a bool"),
        (Admission(True, ""), "reason '', not a non-empty string"),
        (Admission(True, 3), "reason 3, not a non-empty string"),
        (Admission(False, "x" * 65), "a reason of 65 characters, more than 64"),
    ],
)
def test_invalid_answers(answer, problem):
    verdict, what = accept_answer(answer)
    assert verdict is None
    assert problem in what


class Answers(AdmissionRule):
    """Answers whatever the options say, to drive the set's validation."""

    def admit(self, group, stats):
        answer = self.options["answer"]
        if isinstance(answer, Exception):
            raise answer
        return answer() if callable(answer) else answer


def answering(answer) -> AdmissionSet:
    registry.register("group_admission", "answers", Answers, options=lambda o: o)
    try:
        return admission_set(run="answers", run_options={"answer": answer})
    finally:
        registry.unregister("group_admission", "answers")


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (RuntimeError("boom"), "it raised RuntimeError: boom"),
        ("no", "it returned str 'no', not an Admission or a bool"),
        (Admission(True, "x" * 70), "it returned a reason of 70 characters, more than 64"),
    ],
)
def test_a_failing_rule_fails_open_and_warns_once(answer, said):
    s = answering(answer)
    for _ in range(3):
        assert s.decide(group("uniform"), view(), entry="a") == (Admission(True, "admitted"), "answers")
    [warning] = s.take_warnings()
    assert warning.startswith("group admission 'answers' failed on a group of task 'a0': " + said)
    assert "train/admission/errors" in warning
    assert s.metrics(draws=None)["train/admission/errors"] == 3.0
    assert s.metrics(draws=None)["train/admission/errors"] == 0.0  # reset after reading
    s.decide(group("uniform"), view(), entry="a")
    assert s.take_warnings() == []  # once per rule, not per step


def test_an_awaitable_answer_is_closed_and_fails_open():
    made = []

    async def later():
        return True

    def coroutine():
        made.append(later())
        return made[-1]

    s = answering(coroutine)
    assert s.decide(group("trained"), view(), entry=None) == (Admission(True, "admitted"), "answers")
    assert inspect.getcoroutinestate(made[0]) == inspect.CORO_CLOSED
    [warning] = s.take_warnings()
    assert "returned an awaitable" in warning


def test_a_valid_answer_passes_through():
    assert answering(False).decide(group("trained"), view(), entry="b") == (
        Admission(False, "rejected"),
        "answers",
    )
    s = answering(Admission(False, "too_easy"))
    assert s.decide(group("trained"), view(), entry="b") == (Admission(False, "too_easy"), "answers")
    assert s.take_warnings() == []


def test_a_failed_workflow_is_rejected_without_asking_the_rule():
    s = answering(RuntimeError("must not be asked"))
    assert s.decide(None, view(), entry="a") == (Admission(False, "failed"), "answers")
    assert s.take_warnings() == []
    # Even an entry at `all`, in rule mode.
    s = admission_set(entry_rules={"a": ("all", {}), "b": (None, {})})
    assert s.decide(None, view(), entry="a") == (Admission(False, "failed"), "all@a")


def test_unknown_verdicts_are_warned_once_per_rule():
    s = admission_set(entry_rules={"a": (None, {}), "b": ("informative", {})})
    assert s.decide(group("mystery"), view(), entry="a") == (Admission(True, "unknown"), "informative")
    assert s.decide(group("unknown"), view(), entry="a") == (Admission(True, "unknown"), "informative")
    assert s.decide(group("unknown", task="b0", entry="b"), view(), entry="b") == (
        Admission(True, "unknown"),
        "informative@b",
    )
    warnings = s.take_warnings()
    assert len(warnings) == 2
    assert warnings[0].startswith(
        "group admission 'informative' admitted a group of task 'a0' whose verdict 'mystery'"
    )
    assert warnings[1].startswith("group admission 'informative@b'")
    assert s.metrics(draws=None)["train/admission/errors"] == 0.0


# ------------------------------------------------------------------------------------------------ resolution


class Registered(AdmissionRule):
    def admit(self, group, stats):
        return True


class AsyncRule:
    async def admit(self, group, stats):
        return True


class NoAdmit:
    admit = 3


@pytest.fixture
def registered():
    registry.register("group_admission", "keep_all", Registered)
    registry.register("group_admission", "async_rule", AsyncRule)
    registry.register("group_admission", "no_admit", NoAdmit)
    yield
    for name in ("keep_all", "async_rule", "no_admit"):
        registry.unregister("group_admission", name)


def test_rule_classes_meet_the_protocol():
    from platoon.policy.admission import GroupAdmission

    setup = AdmissionSetup("x", "run", None, {}, 8)
    assert isinstance(AdmitAll(setup, None), GroupAdmission)
    assert isinstance(Informative(setup, None), GroupAdmission)
    assert not isinstance(object(), GroupAdmission)


def test_resolution_order(registered):
    assert resolve_group_admission("all") is AdmitAll
    assert resolve_group_admission("informative") is Informative
    assert resolve_group_admission("keep_all") is Registered
    assert resolve_group_admission("platoon.policy.admission:Informative") is Informative
    assert resolve_group_admission(Registered) is Registered


def test_core_names_cannot_be_registered_over():
    for name in ("all", "Informative", "ALL"):
        with pytest.raises(ValueError, match="is core's"):
            registry.register("group_admission", name, Registered)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (
            "informativ",
            r"unknown group admission 'informativ'; did you mean 'informative'\? Core's: all and informative\.",
        ),
        ("zzz", r"^unknown group admission 'zzz'\. Core's: all and informative\.$"),
        ("no_such_module_xyz:Rule", r"cannot import 'no_such_module_xyz' .*ModuleNotFoundError"),
        ("platoon.policy.admission:Nope", r"has no 'Nope'"),
        ("platoon.policy.admission:ADMITTED", r"is not a class but Admission"),
        ("async_rule", r"admit must be a plain function, not async"),
        ("no_admit", r"has no callable admit\(group, stats\)"),
        ("", r"is a name or module:Class"),
    ],
)
def test_resolution_errors(registered, ref, message):
    with pytest.raises(ExtensionError, match=message):
        resolve_group_admission(ref)


# ------------------------------------------------------------------------------------------------ the set


def test_rule_mode_is_decided_by_name():
    assert admission_set(run="all").rule_mode is False
    assert admission_set(run="informative").rule_mode is True
    # A module:Class that resolves to AdmitAll is still a rule.
    assert admission_set(run="platoon.policy.admission:AdmitAll").rule_mode is True
    # One entry of its own is enough; entries that all say `all` are not.
    assert admission_set(run="all", entry_rules={"a": (None, {}), "b": ("informative", {})}).rule_mode is True
    assert (
        admission_set(run="informative", entry_rules={"a": ("all", {}), "b": ("all", {})}).rule_mode is False
    )
    # Without entries, the run's rule decides.
    assert admission_set(run="informative", entries=(), entry_rules={}).rule_mode is True
    assert admission_set(run="all", entries=(), entry_rules={}).rule_mode is False


def test_entries_inherit_the_run_rule_and_its_instance():
    s = admission_set(
        run="informative", run_options={"band": [0.4, 0.6]}, entry_rules={"a": (None, {}), "b": ("all", {})}
    )
    assert s.rule_name("a") == "informative"
    assert s.rule_name("b") == "all@b"
    assert s.rule_name(None) == "informative"
    assert s.decide(group("trained", (1.0, 1.0, 1.0, 0.0)), view(), entry="a") == (
        Admission(False, "above_band"),
        "informative",
    )
    assert s.decide(group("uniform", task="b0", entry="b"), view(), entry="b") == (Admission(True), "all@b")


def test_config_problems_are_reported_together():
    with pytest.raises(ConfigError) as info:
        admission_set(
            run="informativ",
            entry_rules={"a": (None, {"band": [0.1, 0.9]}), "b": ("informative", {"band": [2, 3]})},
        )
    problems = info.value.problems
    assert problems[0].startswith("train.group_admission: unknown group admission 'informativ'")
    assert problems[1].startswith(
        "environments['a'].group_admission_options: set without environments['a'].group_admission"
    )
    assert problems[2].startswith("environments['b'].group_admission_options.band: must be two numbers")
    assert len(problems) == 3


def test_metrics_per_label_and_run_wide():
    s = admission_set(batch_size=4)
    s.note("admitted", label="a", reason="admitted", informative=True)
    s.note("admitted", label="a", reason="unknown", informative=False)
    s.note("rejected", label="a", reason="uniform_pass", informative=False)
    s.note("rejected", label="b", reason="uniform_pass", informative=False)
    s.note("failed", label="b", reason="failed", informative=None)
    s.note("stale", label="b", reason="admitted", informative=True)
    assert s.metrics(draws=8.0) == {
        "train/admission/groups_admitted": 2.0,
        "train/admission/admitted/unknown": 1.0,
        "train/admission/rejected": 2.0,
        "train/admission/rejected/uniform_pass": 2.0,
        "train/admission/stale": 1.0,
        "train/admission/failed": 1.0,
        "train/admission/informative_rate": 2 / 5,
        "train/admission/errors": 0.0,
        "train/admission/draws_per_admitted": 4.0,
        "train/admission/environment/a/admitted": 2.0,
        "train/admission/environment/a/admitted/unknown": 1.0,
        "train/admission/environment/a/rejected": 1.0,
        "train/admission/environment/a/rejected/uniform_pass": 1.0,
        "train/admission/environment/a/stale": 0.0,
        "train/admission/environment/a/failed": 0.0,
        "train/admission/environment/a/informative_rate": 1 / 3,
        "train/admission/environment/b/admitted": 0.0,
        "train/admission/environment/b/rejected": 1.0,
        "train/admission/environment/b/rejected/uniform_pass": 1.0,
        "train/admission/environment/b/stale": 1.0,
        "train/admission/environment/b/failed": 1.0,
        "train/admission/environment/b/informative_rate": 1 / 2,
    }
    # Reset after reading; every label is still logged.
    assert s.metrics(draws=8.0) == {
        "train/admission/groups_admitted": 0.0,
        "train/admission/rejected": 0.0,
        "train/admission/stale": 0.0,
        "train/admission/failed": 0.0,
        "train/admission/errors": 0.0,
        "train/admission/environment/a/admitted": 0.0,
        "train/admission/environment/a/rejected": 0.0,
        "train/admission/environment/a/stale": 0.0,
        "train/admission/environment/a/failed": 0.0,
        "train/admission/environment/b/admitted": 0.0,
        "train/admission/environment/b/rejected": 0.0,
        "train/admission/environment/b/stale": 0.0,
        "train/admission/environment/b/failed": 0.0,
    }


def test_a_slash_in_a_label_becomes_two_dashes():
    s = admission_set(entries=("math/easy",), entry_rules={"math/easy": (None, {})})
    s.note("admitted", label="math/easy", reason="admitted", informative=True)
    assert s.metrics(draws=None)["train/admission/environment/math--easy/admitted"] == 1.0


def test_reason_keys_are_short_words_and_at_most_16_per_rule():
    s = admission_set()
    for i in range(20):
        s.note("rejected", label="a", reason=f"r{i:02d}", informative=True)
    s.note("rejected", label="a", reason="Not A Key", informative=True)
    s.note("rejected", label="a", reason="r00", informative=True)  # already a key
    m = s.metrics(draws=None)
    keys = sorted(k for k in m if k.startswith("train/admission/rejected/"))
    assert keys == ["train/admission/rejected/other"] + [
        f"train/admission/rejected/r{i:02d}" for i in range(16)
    ]
    assert m["train/admission/rejected/other"] == 5.0
    assert m["train/admission/rejected/r00"] == 2.0
    assert m["train/admission/rejected"] == 22.0


def test_note_refuses_an_unknown_kind():
    with pytest.raises(
        ValueError, match="note: kind must be one of admitted, rejected, stale, failed, got 'marker'"
    ):
        admission_set().note("marker", label="a", reason=None, informative=None)


def test_lock_records():
    s = admission_set(
        run="informative",
        run_options={"band": [0.1, 0.9]},
        entries=("a", "b", "c", "d"),
        entry_rules={
            "a": (None, {}),
            "b": ("all", {}),
            "c": ("platoon.policy.admission:Informative", {}),
            "d": ("platoon.policy.admission:Informative", {"band": [0.2, 0.8]}),
        },
    )
    from platoon import __version__

    core = {"distribution": "platoon", "distribution_version": __version__, "entry_point": None}
    assert s.records() == [
        {
            "kind": "group_admission",
            "ref": "informative",
            "resolved": "platoon.policy.admission:Informative",
            "source": "platoon.policy.admission:Informative",
            **core,
            "level": "run",
            "environments": ["a"],
            "options": {"train": {"band": [0.1, 0.9]}},
        },
        {
            "kind": "group_admission",
            "ref": "platoon.policy.admission:Informative",
            "resolved": "platoon.policy.admission:Informative",
            "source": "platoon.policy.admission:Informative",
            **core,
            "level": "entry",
            "environments": ["c", "d"],
            "options": {"c": {"band": None}, "d": {"band": [0.2, 0.8]}},
        },
    ]
    assert admission_set(run="all").records() == []


def test_plan_line():
    s = admission_set(batch_size=10, entry_rules={"a": (None, {}), "b": ("all", {})})
    assert s.plan_line(max_groups_per_step=1.1) == (
        "group admission (experimental): informative for a; all for b; a step trains the first 10 admitted groups "
        "of at most 11 (refill.max_groups_per_step 1.1)"
    )


@pytest.mark.parametrize(
    ("batch", "m", "cap"),
    [(10, 1.1, 11), (10, 1.0, 10), (32, 3.0, 96), (8, 1.01, 9), (3, 1.5, 5), (7, 1.0001, 8)],
)
def test_step_cap(batch, m, cap):
    assert step_cap(batch, m) == cap


def test_carries_datums():
    class NoLen:
        pass

    assert carries_datums(None) is False
    assert carries_datums([]) is False
    assert carries_datums(()) is False
    assert carries_datums([("datum",)]) is True
    assert carries_datums(NoLen()) is True
