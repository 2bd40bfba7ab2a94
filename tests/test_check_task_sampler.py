"""platoon.testing.check_task_sampler: passes core's samplers, and names what is wrong with broken ones."""

from __future__ import annotations

import os
import random
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from platoon.config import registry
from platoon.experimental import Draw, Sampler, task_sampler
from platoon.policy.samplers import PassRateSampler, UniformSampler, WeightedSampler
from platoon.testing import check_task_sampler

HERE = __name__


def failures(sampler, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        check_task_sampler(sampler, **kw)
    return str(info.value)


@pytest.mark.parametrize(
    ("sampler", "levels"),
    [
        (UniformSampler, ("entry", "run")),
        (PassRateSampler, ("entry", "run")),
        (WeightedSampler, ("run",)),
    ],
)
def test_core_samplers_pass(sampler, levels):
    check_task_sampler(sampler, levels=levels)


def test_pass_rate_by_name_with_options_passes_its_subprocess_replays():
    check_task_sampler(
        "pass_rate", options={"explore": 0.5, "max_outstanding_per_task": 1}, levels=("entry",)
    )


# ----------------------------------------------------------------------------------------------- broken samplers


class Rotating(Sampler):
    """A correct static sampler: the pool in order."""

    def next(self, ctx):
        return Draw(ctx.task_ids[ctx.decision % len(ctx.task_ids)], "rotate")


class GlobalRandom(Rotating):
    def next(self, ctx):
        return random.choice(ctx.task_ids)


class HashOrder(Rotating):
    def next(self, ctx):
        return sorted(set(ctx.task_ids), key=hash)[ctx.decision % len(set(ctx.task_ids))]


class OutOfPool(Rotating):
    def next(self, ctx):
        return "not-a-task" if ctx.decision == 5 else super().next(ctx)


class CallCounter(Rotating):
    """Answers by how often it was asked, not by the decision: not static, and its state is lost."""

    def __init__(self, setup, options):
        super().__init__(setup, options)
        self.calls = 0

    def next(self, ctx):
        self.calls += 1
        return ctx.task_ids[(self.calls * 7) % len(ctx.task_ids)]


class Greedy(Sampler):
    """An adaptive sampler that ignores eligibility and never returns None."""

    adaptive = True

    def next(self, ctx):
        return ctx.task_ids[0]


class BadStateAndMetrics(Rotating):
    def state_dict(self):
        return {1: "key"}

    def metrics(self, stats):
        return {"draws": 1.0, "ratio": float("inf")}


class Loose(BaseModel):
    width: int = 1


class LooseOptions(Rotating):
    options_schema = Loose


class Async(Rotating):
    async def next(self, ctx):
        return ctx.task_ids[0]


def test_an_out_of_pool_answer_is_named_with_its_decision():
    text = failures(OutOfPool, levels=("run",))
    assert "pool-task-or-nothing [run level, all eligible]: decision 5 answered task 'not-a-task'" in text
    assert "which is not in its pool" in text


def test_global_randomness_fails_determinism_and_static():
    text = failures(GlobalRandom, levels=("run",))
    assert "deterministic [run level]: two fresh instances differ" in text
    assert "ctx.rng or ctx.key" in text
    assert "static [run level]" in text


def test_an_answer_that_depends_on_call_count_fails_static_and_state():
    text = failures(CallCounter, levels=("entry",))
    assert "static [entry a]" in text and "function of ctx.decision" in text
    assert "state [entry a]" in text and "state_dict must hold everything" in text


def test_an_adaptive_sampler_must_answer_eligible_tasks_or_none():
    text = failures(Greedy, levels=("entry",))
    assert "[entry a, label x at its limit]: decision 0 answered task 'a::a0', which is not eligible now" in text
    assert "[entry a, nothing eligible]" in text and "the only answer then is None" in text


def test_state_and_metrics_problems_are_listed_together():
    text = failures(BadStateAndMetrics, levels=("run",))
    assert "failed 2 check(s)" not in text  # every check that failed is listed, here more than two
    assert "state [run level]: state_dict after 37 decisions is not JSON data with string keys" in text
    assert "metrics [run level]: metrics(view) gave 'ratio': inf, not a finite number" in text


def test_options_that_accept_unknown_keys_and_async_next():
    assert "accepted an unknown key 'conformance_check_unknown_option'" in failures(
        LooseOptions, levels=("run",)
    )
    assert "must be a plain (synchronous) method" in failures(Async)
    assert "check it with levels=('run',)" in failures(WeightedSampler)
    assert "the schema refuses the given options" in failures(PassRateSampler, options={"explore": 3})


def test_a_slow_sampler_fails_its_budget():
    assert "fast [run level]: the median of 41 decisions over 4096 tasks" in failures(
        Rotating, levels=("run",), budget_ms=1e-6
    )
    check_task_sampler(Rotating, levels=("run",), budget_ms=None)


def test_hash_seed_dependence_shows_only_in_the_subprocess_replays():
    text = failures(f"{HERE}:HashOrder", levels=("run",), budget_ms=None)
    assert "deterministic [run level, PYTHONHASHSEED=" in text and "hash()" in text


REGISTERING_MODULE = """
from platoon.experimental import Draw, Sampler, task_sampler


@task_sampler("check-rotating")
class RegisteredRotating(Sampler):
    def next(self, ctx):
        return Draw(ctx.task_ids[ctx.decision % len(ctx.task_ids)], "rotate")
"""


def test_a_registered_name_resolves_and_replays_where_its_module_registers_it(tmp_path, monkeypatch):
    """The replays import the class's module, which registers the name, then resolve the name (as 0.4.0's do)."""
    (tmp_path / "registers_rotating.py").write_text(REGISTERING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delitem(sys.modules, "registers_rotating", raising=False)
    try:
        import registers_rotating  # noqa: F401 - registers check-rotating

        check_task_sampler("check-rotating", levels=("run",), budget_ms=None)
    finally:
        registry.unregister("task_sampler", "check-rotating")
    assert "unknown task sampler 'check-rotating'" in failures("check-rotating")


class RegisteredAtRunTime(Rotating):
    pass


def test_a_name_registered_only_at_run_time_fails_the_replays():
    """No module registers it on import, so a new process cannot resolve it, as a run's next process could not."""
    task_sampler("check-run-time")(RegisteredAtRunTime)
    try:
        text = failures("check-run-time", levels=("run",), budget_ms=None)
    finally:
        registry.unregister("task_sampler", "check-run-time")
    assert "deterministic [run level, PYTHONHASHSEED=0]: the subprocess replay failed" in text
    assert "unknown task sampler 'check-run-time'" in text


@dataclass
class Width:
    width: int = 2


class WithWidth(Rotating):
    options_schema = Width


def test_a_dataclass_schema_refuses_unknown_keys():
    check_task_sampler(WithWidth, options={"width": 3}, levels=("run",), budget_ms=None)


# ----------------------------------------------------------------------------------------------- the guide's example


def python_blocks(path: Path) -> list[str]:
    text = path.read_text()
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def test_the_guides_example_sampler_keeps_the_contract(monkeypatch):
    sampler_code, test_code = python_blocks(Path(__file__).parents[1] / "docs" / "task-samplers.md")
    module = types.ModuleType("task_samplers_guide")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    try:
        exec(compile(sampler_code + "\n" + test_code, "docs/task-samplers.md", "exec"), module.__dict__)
        assert registry.lookup("task_sampler", "fewest-groups") is module.FewestGroups
        module.test_fewest_groups_keeps_the_contract()
    finally:
        registry.unregister("task_sampler", "fewest-groups")
