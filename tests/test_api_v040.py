"""The plug-in API as platoon 0.4.0 exports it: its names import from ``platoon.experimental`` and
``platoon.testing``, and each of its callables takes the parameters 0.4.0's takes (names, how they may be passed,
defaults). 0.4.0's surface was recorded by 0.4.0 itself into ``tests/fixtures/v040/api_040.json``
(``record_api.py`` says how)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import platoon.experimental as experimental
import platoon.testing as testing
from platoon.experimental import (
    AdmissionRule,
    Draw,
    EntryInfo,
    GroupRecord,
    MemberResult,
    Sampler,
    SamplerContext,
    TaskSampler,
    TaskStatsStore,
    TaskStatsView,
)

API = json.loads((Path(__file__).parent / "fixtures" / "v040" / "api_040.json").read_text())

# 0.4.0's platoon.testing names for testing episodes against the Tinker service and its harnesses (a scripted policy,
# a model gateway, a toy tokenizer and renderer, a pytest plugin): this project has no such harness, so they are left
# out. Every other 0.4.0 name must import.
NOT_IMPLEMENTED = {
    "testing": {
        "TOY_MODEL_NAME", "TOY_RENDERER_NAME", "TOY_TOKENIZER_DIR", "Completion", "EpisodeRun", "PolicyCall",
        "ScriptExhaustedError", "ScriptedPolicy", "last_user_message", "make_gateway", "rules", "run_episode",
        "sample_response", "serve_policy", "tool_call", "toy_renderer", "toy_tokenizer",
    },
    "experimental": set(),
}
# Parameters of 0.4.0 that this project does not have, by callable, and why.
NOT_TAKEN = {
    # The decay half-life, the prior's strength and the no-evidence limit are constants of this project's store.
    "experimental.TaskStatsStore": {"half_life", "prior_strength", "no_evidence_limit"},
}
# 0.4.0's RolloutLease is built by its trainer only; this project's lease takes its own host (docs/live-runtime.md).
OTHER_SIGNATURES = {"experimental.RolloutLease"}
MODULES = {"experimental": experimental, "testing": testing}


@pytest.mark.parametrize("module", ["experimental", "testing"])
def test_every_040_name_imports_under_its_name(module):
    missing = [
        name for name in API[module] if name not in NOT_IMPLEMENTED[module] and not hasattr(MODULES[module], name)
    ]
    assert missing == []
    assert set(API[module]) - NOT_IMPLEMENTED[module] <= set(MODULES[module].__all__)


def resolve(path: str):
    module, *names = path.split(".")
    obj = MODULES[module]
    for name in names:
        obj = getattr(obj, name)
    return obj


POSITIONAL = {"POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"}


@pytest.mark.parametrize("path", sorted(set(API["signatures"]) - OTHER_SIGNATURES))
def test_each_040_parameter_is_taken_with_its_default(path):
    ours = inspect.signature(resolve(path)).parameters
    problems = []
    for theirs in API["signatures"][path]:
        name = theirs["name"]
        if name in NOT_TAKEN.get(path, ()):
            continue
        if theirs["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            continue
        mine = ours.get(name)
        if mine is None:
            problems.append(f"{name}: missing")
            continue
        if theirs["kind"] in POSITIONAL and mine.kind.name not in POSITIONAL:
            problems.append(f"{name}: 0.4.0 takes it by position, ours by keyword only")
        if theirs["default"] is not None and (
            mine.default is inspect.Parameter.empty or repr(mine.default) != theirs["default"]
        ):
            problems.append(f"{name}: default {theirs['default']} in 0.4.0, {mine.default!r} here")
    if path == "experimental.TaskStatsStore":  # ours derives a task of no entry's group size from the first entry
        problems = [p for p in problems if not p.startswith("group_size: default")]
    assert problems == []


# ------------------------------------------------------------------------------------------------- semantics


class DuckSampler:
    adaptive = False

    def next(self, ctx):
        return ctx.task_ids[0]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_task_sampler_is_a_runtime_checkable_protocol():
    assert isinstance(DuckSampler(), TaskSampler)
    assert isinstance(Sampler(None), TaskSampler)
    assert not isinstance(object(), TaskSampler)
    assert not issubclass(DuckSampler, Sampler)


def test_admission_rule_options_default_to_none():
    class Rule(AdmissionRule):
        def admit(self, group, stats):
            return True

    assert Rule(None).options is None


def test_a_sampler_context_is_built_by_position_as_040_builds_it():
    ctx = SamplerContext(("t0", "t1"), None, 3, 99, lambda t: True, None, 7, {"main": 2})
    assert (ctx.task_ids, ctx.decision, ctx.key, ctx.step, ctx.versions) == (("t0", "t1"), 3, 99, 7, {"main": 2})
    assert ctx.rng.random() == SamplerContext(("t0",), None, 0, 99, lambda t: True).rng.random()


def test_a_draw_takes_any_reason_and_score():
    """The runtime refuses what cannot be recorded (tests/policy/test_samplers_runtime.py), not the constructor."""
    assert Draw("t", "", float("nan")).reason == ""


def settled(task: str, seq: int, passes: int) -> GroupRecord:
    members = tuple(
        MemberResult(reward=float(i < passes), scored=float(i < passes), valid=True, outcome="scored",
                     disposition="completed", reward_key=None, steps=1, output_tokens=1, seconds=1.0,
                     versions={"main": (1, 1)})
        for i in range(4)
    )
    return GroupRecord(start=1, seq=seq, task_id=task, entry="a", labels={"label": "x"}, harness=None, group_size=4,
                       sampler="s", reason="order", score=None, position=None, drawn_at={"main": 1}, members=members,
                       verdict="trained" if 0 < passes < 4 else "uniform")


def test_a_test_builds_statistics_as_with_040():
    store = TaskStatsStore([("t0", "a", "x"), ("t1", "a", "x")], {"a": EntryInfo(4)}, column="label")
    store.draw(1, 0, "t0")  # the position may be left out
    store.settle(settled("t0", 0, 2))
    store.draw(1, 1, "t1")
    view = TaskStatsView(store, now=1)
    assert view.counts("t0")[:3] == (1, 1, 1) and view.counts("t1")[:3] == (0, 1, 1)
    assert store.task_ids() == ("t0", "t1") == view.task_ids()
    assert store.task("t0").passes == 2 and store.entry("a").groups == 1 and store.label("x").groups == 1
    assert [d[:3] for d in store.outstanding] == [(1, 0, "t0"), (1, 1, "t1")]
    assert store.group_size("a") == 4 and store.threshold("a") == 1.0


def test_cached_counts_follow_every_write():
    """counts() serves a cache; each write that moves a task's counts refreshes it (checked against the arrays)."""
    tasks = [(f"t{i}", "a", "x") for i in range(6)]
    store = TaskStatsStore(tasks, {"a": EntryInfo(4)}, column="label")
    ids = store.task_ids()

    def agree() -> None:
        arrays = store.count_arrays(ids)
        for i, task in enumerate(ids):
            version = arrays.evidence_version[i]
            expected = (*(int(a[i]) for a in arrays[:5]), None if version != version else int(version))
            assert tuple(store.counts(task)) == expected, task

    agree()
    for seq in range(12):
        task = ids[seq % 4]
        store.draw(1, seq, task)
        agree()
        store.settle(settled(task, seq, seq % 5))
        agree()
        if seq % 3:
            store.fate(1, seq, "consumed")
            agree()
    store.replace_outstanding([(2, 0, "t5", None), (2, 1, "t5", None)])
    agree()
    assert store.counts("t5").outstanding == 2
    snapshot = store.to_json()
    other = TaskStatsStore(tasks, {"a": EntryInfo(4)}, column="label")
    other.counts("t0")  # cached before the load
    other.load_json(snapshot)
    assert [other.counts(t) for t in ids] == [store.counts(t) for t in ids]
    with pytest.raises(KeyError):
        store.counts("not-a-task")
