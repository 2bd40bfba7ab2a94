"""Effective settings and stage 2: packages, registered and module:Class components, schemas, checks, records."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import platoon
from platoon.config import (
    ConfigError,
    EnvironmentConfig,
    RunConfig,
    TrainConfig,
    effective_group_size,
    entry_admission,
    entry_max_staleness,
    entry_sampler,
    entry_sim,
    is_rule_mode,
    load_config,
    max_concurrent_rollouts,
    registry,
    resolve_components,
    run_sampler,
    step_cap,
)
from platoon.config.components import NumberSearchOptions
from platoon.config.effective import entry_workflow, group_size, sampling, select_tasks, straggler_policy
from platoon.config.models import default_config
from platoon.config.sections import DatasetKwargs
from platoon.config.steps import event_interval, planned_steps, run_directory, steps_per_epoch, with_steps

_names = itertools.count()

PLUGIN = """
import dataclasses
from pydantic import BaseModel, ConfigDict
from platoon.config.registry import task_sampler, group_admission


class Opts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depth: int = 2
    label: str = "x"


@dataclasses.dataclass
class DcOpts:
    k: int = 1


def parse(options):
    if set(options) - {"n"}:
        raise ValueError("only n")
    return {"n": int(options.get("n", 0))}


class Base:
    adaptive = False
    entry_slots = False
    def next(self, ctx): ...
    def state_dict(self): return {}
    def load_state_dict(self, state): ...


def refuse_deep(options, ctx):
    if options.depth > 5:
        raise ValueError(f"depth {options.depth} is too deep for batch_size {ctx.batch_size}")


@task_sampler("{prefix}model", options=Opts, check=refuse_deep)
class WithModel(Base):
    entry_slots = True


@task_sampler("{prefix}dc", options=DcOpts)
class WithDataclass(Base):
    pass


@task_sampler("{prefix}fn", options=parse)
class WithFunction(Base):
    pass


@task_sampler("{prefix}slots")
class Slots(Base):
    entry_slots = True


@task_sampler("{prefix}noslots")
class NoSlots(Base):
    pass


class Bare(Base):
    @staticmethod
    def check(options, ctx):
        raise ValueError(__name__ + ":Bare refuses level " + ctx.level)


class NotASampler:
    pass


class AsyncNext(Base):
    async def next(self, ctx): ...


class Broken(Base):
    @staticmethod
    def check(options, ctx):
        raise KeyError("oops")


@group_admission("{prefix}rule")
class Rule:
    needs_verdicts = True
    def admit(self, group, stats): return True
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package that registers components under fresh names; yields its module name (also the names' prefix)."""
    name = f"cfg_plugin_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(PLUGIN.replace("{prefix}", name + "_"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    for kind in ("task_sampler", "group_admission"):
        for n in registry.registered_names(kind, load=False):
            if n.startswith(name):
                registry.unregister(kind, n)


def train(**keys: object) -> TrainConfig:
    """A TrainConfig built in code: the keys every config sets, and ``keys``."""
    return TrainConfig(**{"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 10, **keys})


def run(train_keys: dict | None = None, environments: list[EnvironmentConfig] | None = None) -> RunConfig:
    """A RunConfig built in code (the default entry unless ``environments``)."""
    extra = {} if environments is None else {"environments": environments}
    return RunConfig(train=train(**(train_keys or {})), **extra)


def cfg_of(text: str, tmp_path: Path) -> RunConfig:
    data = yaml.safe_load(textwrap.dedent(text))
    data["train"] = {"model_name": "tiny", "renderer_name": "role_colon", **data.get("train", {})}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def resolve_problems(cfg: RunConfig, **kw: bool) -> list[str]:
    with pytest.raises(ConfigError) as info:
        resolve_components(cfg, **kw)
    return info.value.problems


# --- effective settings ----------------------------------------------------------------------------------------


def test_auto_is_uniform_for_one_plain_entry_and_weighted_otherwise() -> None:
    one = default_config()
    assert run_sampler(one) == "uniform" and entry_sampler(one, 0) is None
    own = run(environments=[EnvironmentConfig(name="a", task_sampler="pass_rate")])
    assert run_sampler(own) == "weighted" and entry_sampler(own, 0) == "pass_rate"
    own_uniform = run(environments=[EnvironmentConfig(name="a", task_sampler="uniform")])
    assert run_sampler(own_uniform) == "uniform"
    two = run(environments=[EnvironmentConfig(name="a"), EnvironmentConfig(name="b")])
    assert run_sampler(two) == "weighted" and [entry_sampler(two, i) for i in (0, 1)] == [
        "uniform",
        "uniform",
    ]
    flat = run({"task_sampler": "pass_rate"}, two.environments)
    assert entry_sampler(flat, 1) is None


def test_rule_mode_is_decided_by_name() -> None:
    entries = [
        EnvironmentConfig(name="a"),
        EnvironmentConfig(name="b", group_admission="pkg:AdmitEverything"),
    ]
    assert is_rule_mode(run(environments=entries))
    assert not is_rule_mode(default_config())
    assert is_rule_mode(run({"group_admission": "informative"}))
    every_own_all = [EnvironmentConfig(name="a", group_admission="all")]
    assert not is_rule_mode(run({"group_admission": "informative"}, every_own_all))
    cfg = run({"group_admission": "informative", "group_admission_options": {"band": [0.1, 0.9]}}, entries)
    assert entry_admission(cfg, 0) == ("informative", {"band": [0.1, 0.9]}, "run")
    assert entry_admission(cfg, 1) == ("pkg:AdmitEverything", {}, "entry")


def test_permits_staleness_and_cap() -> None:
    entries = [
        EnvironmentConfig(name="a", workflow_config={"group_size": 4}),
        EnvironmentConfig(name="b", workflow_config={"group_size": 6}, max_staleness=0),
        EnvironmentConfig(name="c"),
    ]
    cfg = run({"batch_size": 10, "workflow_config": {"group_size": 5}}, entries)
    assert [group_size(cfg, i) for i in range(3)] == [4, 6, 5]
    assert effective_group_size(cfg) == 6 and max_concurrent_rollouts(cfg) == 60
    assert max_concurrent_rollouts(default_config()) == 32 * 8
    assert max_concurrent_rollouts(run({"max_concurrent_rollouts": 7})) == 7
    assert [entry_max_staleness(cfg, i) for i in range(3)] == [None, 0, None]
    assert entry_max_staleness(run({"max_staleness": 2}, entries), 0) == 2
    assert step_cap(run({"batch_size": 10, "refill": {"max_groups_per_step": 1.1}})) == 11
    assert step_cap(run({"batch_size": 10, "refill": {"max_groups_per_step": 1.0}})) == 10
    assert step_cap(run({"batch_size": 32})) == 96


def test_an_entrys_workflow_settings_inherit_the_runs() -> None:
    entries = [
        EnvironmentConfig(name="a", workflow_config={"straggler_timeout_seconds": 5.0, "min_successful_group_size": 2,
                                                     "leave_one_out_baseline": True}),
        EnvironmentConfig(name="b"),
    ]
    policies = {"hard": {"timeout_seconds": 90.0, "quorum": 3}}
    cfg = run({"workflow_config": {"straggler_timeout_seconds": 60.0, "straggler_quorum": 6,
                                   "straggler_policies": policies}}, entries)
    a, b = entry_workflow(cfg, 0), entry_workflow(cfg, 1)
    assert (a.straggler_timeout_s, a.straggler_quorum, a.min_successful_group_size, a.leave_one_out_baseline) == (
        5.0, 6, 2, True)
    assert (b.straggler_timeout_s, b.straggler_quorum, b.min_successful_group_size, b.leave_one_out_baseline) == (
        60.0, 6, 1, False)
    # a label's own policy replaces the entry's and the run's keys for that label's groups
    assert straggler_policy(cfg, 0, "hard") == (90.0, 3)
    assert straggler_policy(cfg, 0, "a") == (5.0, 6) and straggler_policy(cfg, 1, "b") == (60.0, 6)
    assert straggler_policy(default_config(), 0, "default") == (None, None)


def test_sampling_reads_the_rollouts_inference_params() -> None:
    assert sampling(default_config()) == (1.0, None)
    params = {"temperature": 0.7, "max_completion_tokens": 6}
    cfg = run({"workflow_config": {"rollout_config": {"inference_params": params}}})
    assert sampling(cfg) == (0.7, 6)


def test_the_plan_the_shorter_of_epochs_and_steps() -> None:
    assert steps_per_epoch(default_config(), 100) == 4 and steps_per_epoch(default_config(), 0) == 1
    assert planned_steps(run({"max_training_steps": 10}), 1000) == 10
    epochs = run({"max_training_steps": None, "num_epochs": 2, "batch_size": 10})
    assert planned_steps(epochs, 95) == 20
    both = run({"max_training_steps": 15, "num_epochs": 2, "batch_size": 10})
    assert planned_steps(both, 95) == 15 and planned_steps(both, 50) == 10
    assert planned_steps(run({"max_training_steps": None}), 95) is None
    again = with_steps(both, 40)
    assert (again.train.max_training_steps, again.train.num_epochs, planned_steps(again, 50)) == (40, None, 40)


@pytest.mark.parametrize(
    ("every", "strategy", "per_epoch", "expected"),
    [(None, None, 5, None), (0, None, 5, None), (3, None, 5, 3), (None, "step", 5, 1), (None, "epoch", 5, 5),
     (2, "epoch", 5, 10), (0, "epoch", 5, None)],
)
def test_event_interval_counts_steps_or_epochs(every, strategy, per_epoch, expected) -> None:
    assert event_interval(every, strategy, per_epoch) == expected


def test_the_run_directory_lies_under_log_path() -> None:
    assert run_directory(default_config()) is None
    cfg = RunConfig.model_validate({"train": {"model_name": "tiny", "renderer_name": "r"}, "log_path": "/logs",
                                    "stats": {"experiment_name": "exp", "trial_name": "t1"}})
    assert run_directory(cfg) == Path("/logs/exp/t1")


def test_select_tasks_excludes_then_shuffles_then_limits() -> None:
    listed = [f"t{i}" for i in range(10)]
    assert select_tasks(listed, DatasetKwargs(), []) == listed
    assert select_tasks(listed, DatasetKwargs(limit=3), ["t0", "t2"]) == ["t1", "t3", "t4"]
    shuffled = select_tasks(listed, DatasetKwargs(shuffle_seed=7), ["t9"])
    assert sorted(shuffled) == sorted(listed[:9]) and shuffled != listed[:9]
    assert shuffled == select_tasks(listed, DatasetKwargs(shuffle_seed=7), ["t9"])
    assert select_tasks(listed, DatasetKwargs(shuffle_seed=7, limit=4), ["t9"]) == shuffled[:4]


def test_entry_sim_merges_and_a_distribution_replaces_whole(tmp_path: Path) -> None:
    cfg = cfg_of(
        """
        sim: {rollout: {duration: {dist: fixed, value_s: 5}, model_calls: 3}, trainer: {step_s: 1}}
        environments:
          - {name: a, sim: {rollout: {duration: {dist: exponential, mean_s: 2}, error_rate: 0.5}}}
          - {name: b}
        """,
        tmp_path,
    )
    a = entry_sim(cfg, 0)
    assert a.rollout.duration.dist == "exponential" and a.rollout.duration.mean_s == 2
    assert (a.rollout.model_calls, a.rollout.error_rate, a.trainer.step_s) == (3, 0.5, 1.0)
    assert entry_sim(cfg, 1) == cfg.sim


# --- stage 2 ---------------------------------------------------------------------------------------------------


def test_unknown_dataset_kwargs_load_and_are_refused_when_resolved(tmp_path: Path) -> None:
    # as in 0.4.0, where they go to the environment's loader: `config validate --no-resolve` passes them
    cfg = cfg_of("""
        environments:
          - {dataset_kwargs: {split: train, limit: 4}, eval_dataset_kwargs: {shufle_seed: 1}}
    """, tmp_path)
    assert cfg.environments[0].dataset_kwargs.limit == 4
    assert resolve_problems(cfg) == [
        "environments.0.dataset_kwargs.split: unknown key; did you mean 'split_name'? (the keys an environment's "
        "tasks are listed by: split_name, shuffle_seed, limit, where)",
        "environments.0.eval_dataset_kwargs.shufle_seed: unknown key; did you mean 'shuffle_seed'? (the keys an "
        "environment's tasks are listed by: split_name, shuffle_seed, limit, where)",
    ]


def test_default_config_records_its_run_sampler_and_environment() -> None:
    sampler, environment = resolve_components(default_config())
    core = {"distribution": "platoon", "distribution_version": platoon.__version__, "entry_point": None}
    assert sampler.to_json() == {
        "kind": "task_sampler",
        "ref": "auto",
        "resolved": "platoon.policy.samplers.uniform:UniformSampler",
        "source": "platoon.policy.samplers.uniform:UniformSampler",
        **core,
        "core": "uniform",
        "level": "run",
        "environments": ["default"],
        "options": {"train": {}},
    }
    assert environment.to_json() == {
        "kind": "environment",
        "ref": "platoon-number-search",
        "resolved": "platoon.live.envs.number_search:NumberSearch",
        "source": "platoon.live.envs.number_search:NumberSearch",
        **core,
        "core": "platoon-number-search",
        "level": "entry",
        "environments": ["default"],
        "options": {"default": NumberSearchOptions(show_range=True).model_dump(mode="json")},  # the demo's
    }


def test_pass_rate_records_its_options_with_defaults() -> None:
    cfg = run({"task_sampler": "pass_rate", "task_sampler_options": {"explore": 0.5}})
    [record] = [r for r in resolve_components(cfg) if r.kind == "task_sampler"]
    assert record.options == {
        "train": {
            "explore": 0.5,
            "max_draws_per_epoch": 3,
            "max_outstanding_per_task": None,
            "candidates": 4096,
            "seed": 0,
            "evidence": "drift",
            "near_best": 0.05,
            "explore_order": "least_recent",
            "forget_versions": None,
            "importance_cap": None,
        }
    }


def test_entry_samplers_group_by_name_under_weighted() -> None:
    entries = [
        EnvironmentConfig(name="a", task_sampler="pass_rate"),
        EnvironmentConfig(name="b"),
        EnvironmentConfig(name="c", task_sampler="pass_rate", task_sampler_options={"seed": 3}),
    ]
    records = [r.to_json() for r in resolve_components(run(environments=entries)) if r.kind == "task_sampler"]
    assert [(r["ref"], r["core"], r["level"], r["environments"]) for r in records] == [
        ("auto", "weighted", "run", ["a", "b", "c"]),
        ("pass_rate", "pass_rate", "entry", ["a", "c"]),
        ("uniform", "uniform", "entry", ["b"]),
    ]
    assert records[1]["options"]["c"]["seed"] == 3 and records[1]["options"]["a"]["explore"] == 0.2


def test_rules_are_recorded_in_rule_mode_only() -> None:
    entries = [EnvironmentConfig(name="a"), EnvironmentConfig(name="b", group_admission="all")]
    cfg = run({"group_admission": "informative"}, entries)
    rules = [r.to_json() for r in resolve_components(cfg) if r.kind == "group_admission"]
    assert rules == [
        {
            "kind": "group_admission",
            "ref": "informative",
            "resolved": "platoon.policy.admission:Informative",
            "source": "platoon.policy.admission:Informative",
            "distribution": "platoon",
            "distribution_version": platoon.__version__,
            "entry_point": None,
            "core": "informative",
            "level": "run",
            "environments": ["a"],
            "options": {"train": {"band": None}},
        }
    ]
    assert [r for r in resolve_components(default_config()) if r.kind == "group_admission"] == []


def test_informative_needs_a_workflow_that_gives_verdicts() -> None:
    cfg = run(environments=[EnvironmentConfig(name="a", group_admission="informative")])
    [line] = resolve_problems(cfg, workflow_gives_verdicts=False)
    assert line.startswith(
        "environments.0.group_admission: informative rejects groups by their workflow's verdict"
    )
    assert resolve_components(cfg, workflow_gives_verdicts=True)


def test_a_package_registers_components_with_every_schema_kind(plugin: str) -> None:
    entries = [
        EnvironmentConfig(
            name="a", package=plugin, task_sampler=f"{plugin}_dc", task_sampler_options={"k": 4}
        ),
        EnvironmentConfig(name="b", task_sampler=f"{plugin}_fn", task_sampler_options={"n": "7"}),
        EnvironmentConfig(name="c", group_admission=f"{plugin}_rule"),
    ]
    cfg = run({"task_sampler": f"{plugin}_model", "task_sampler_options": {"depth": 3}}, entries)
    with pytest.raises(ConfigError):
        resolve_components(cfg, workflow_gives_verdicts=False)
    records = {(r.kind, r.ref): r for r in resolve_components(cfg)}
    model = records[("task_sampler", f"{plugin}_model")]
    assert model.resolved == f"{plugin}:WithModel" and model.core is None
    assert model.options == {"train": {"depth": 3, "label": "x"}} and model.parsed["train"].depth == 3
    assert records[("task_sampler", f"{plugin}_dc")].options == {"a": {"k": 4}}
    assert records[("task_sampler", f"{plugin}_fn")].options == {"b": {"n": 7}}
    rule = records[("group_admission", f"{plugin}_rule")]
    assert (rule.level, rule.environments, rule.options) == ("entry", ("c",), {"c": {}})


def test_stage_two_gathers_every_problem(plugin: str) -> None:
    entries = [
        EnvironmentConfig(
            name="a", package=plugin, task_sampler=f"{plugin}_dc", task_sampler_options={"kk": 1}
        ),
        EnvironmentConfig(name="b", task_sampler=f"{plugin}_fn", task_sampler_options={"m": 1}),
        EnvironmentConfig(name="c", task_sampler=f"{plugin}:Bare"),
        EnvironmentConfig(name="d", task_sampler=f"{plugin}_slots"),
        EnvironmentConfig(name="e", task_sampler=f"{plugin}:NotASampler"),
        EnvironmentConfig(name="f", task_sampler=f"{plugin}:AsyncNext"),
        EnvironmentConfig(name="g", task_sampler=f"{plugin}:Broken"),
        EnvironmentConfig(
            name="h",
            task_sampler=f"{plugin}_dcc",
            group_admission=f"{plugin}_rule",
            group_admission_options={"x": 1},
        ),
        EnvironmentConfig(name="i", env=f"{plugin}:Nothing"),
    ]
    cfg = run({"task_sampler": f"{plugin}_model", "task_sampler_options": {"depth": 9, "label": 3}}, entries)
    assert resolve_problems(cfg) == [
        "train.task_sampler_options.label: must be a string, got 3",
        "environments.0.task_sampler_options.kk: unknown key; did you mean 'k'?",
        f"environments.1.task_sampler_options: {plugin}_fn: only n",
        f"environments.2.task_sampler: {plugin}:Bare refuses level entry",
        f"environments.3.task_sampler: {plugin}_slots: hands slots itself, so it can only be the run's sampler",
        f"environments.4.task_sampler: {plugin}:NotASampler: NotASampler has no method next()",
        f"environments.5.task_sampler: {plugin}:AsyncNext: AsyncNext.next is a coroutine function; it must be one "
        "synchronous call",
        f"environments.6.task_sampler: {plugin}:Broken: check raised KeyError: 'oops'",
        f"environments.7.task_sampler: unknown task sampler '{plugin}_dcc'; did you mean '{plugin}_dc'? Core's: auto, "
        "weighted, uniform and pass_rate.",
        f"environments.7.group_admission_options: '{plugin}_rule' takes no options; leave group_admission_options out",
        f"environments.8.env: '{plugin}' has no 'Nothing' (for '{plugin}:Nothing')",
    ]


def test_a_check_message_gets_the_name_prefixed(plugin: str) -> None:
    entries = [EnvironmentConfig(name="a", package=plugin)]
    cfg = run({"task_sampler": f"{plugin}_model", "task_sampler_options": {"depth": 9}}, entries)
    assert resolve_problems(cfg) == [
        f"train.task_sampler: {plugin}_model: depth 9 is too deep for batch_size 32",
    ]


def test_a_run_sampler_without_slots_refuses_entry_samplers(plugin: str) -> None:
    entries = [
        EnvironmentConfig(name="a", package=plugin, task_sampler="pass_rate"),
        EnvironmentConfig(name="b"),
    ]
    cfg = run({"task_sampler": f"{plugin}_noslots"}, entries)
    [line] = resolve_problems(cfg)
    assert line.startswith(f"environments.0.task_sampler: {plugin}_noslots hands no slots to entries")
    slots = run({"task_sampler": f"{plugin}_slots"}, entries)
    refs = [(r.ref, r.level, r.environments) for r in resolve_components(slots) if r.kind == "task_sampler"]
    assert refs == [
        (f"{plugin}_slots", "run", ("a", "b")),
        ("pass_rate", "entry", ("a",)),
        ("uniform", "entry", ("b",)),
    ]


def test_a_package_that_fails_to_import() -> None:
    cfg = run(environments=[EnvironmentConfig(name="a", package="no_such_package_xyz")])
    [line] = resolve_problems(cfg)
    assert line.startswith(
        "environments.0.package: cannot import package 'no_such_package_xyz': ModuleNotFoundError"
    )
