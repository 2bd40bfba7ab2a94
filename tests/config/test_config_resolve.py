"""Effective settings and stage 2: packages, registered and module:Class components, schemas, checks, records."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def cfg_of(text: str, tmp_path: Path) -> RunConfig:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text))
    return load_config(path)


def resolve_problems(cfg: RunConfig, **kw: bool) -> list[str]:
    with pytest.raises(ConfigError) as info:
        resolve_components(cfg, **kw)
    return info.value.problems


# --- effective settings ----------------------------------------------------------------------------------------


def test_auto_is_uniform_for_one_plain_entry_and_weighted_otherwise() -> None:
    one = RunConfig()
    assert run_sampler(one) == "uniform" and entry_sampler(one, 0) is None
    own = RunConfig(environments=[EnvironmentConfig(name="a", task_sampler="pass_rate")])
    assert run_sampler(own) == "weighted" and entry_sampler(own, 0) == "pass_rate"
    own_uniform = RunConfig(environments=[EnvironmentConfig(name="a", task_sampler="uniform")])
    assert run_sampler(own_uniform) == "uniform"
    two = RunConfig(environments=[EnvironmentConfig(name="a"), EnvironmentConfig(name="b")])
    assert run_sampler(two) == "weighted" and [entry_sampler(two, i) for i in (0, 1)] == [
        "uniform",
        "uniform",
    ]
    flat = RunConfig(train=TrainConfig(task_sampler="pass_rate"), environments=two.environments)
    assert entry_sampler(flat, 1) is None


def test_rule_mode_is_decided_by_name() -> None:
    entries = [
        EnvironmentConfig(name="a"),
        EnvironmentConfig(name="b", group_admission="pkg:AdmitEverything"),
    ]
    assert is_rule_mode(RunConfig(environments=entries))
    assert not is_rule_mode(RunConfig())
    assert is_rule_mode(RunConfig(train=TrainConfig(group_admission="informative")))
    every_own_all = [EnvironmentConfig(name="a", group_admission="all")]
    assert not is_rule_mode(
        RunConfig(train=TrainConfig(group_admission="informative"), environments=every_own_all)
    )
    cfg = RunConfig(
        train=TrainConfig(group_admission="informative", group_admission_options={"band": [0.1, 0.9]}),
        environments=entries,
    )
    assert entry_admission(cfg, 0) == ("informative", {"band": [0.1, 0.9]}, "run")
    assert entry_admission(cfg, 1) == ("pkg:AdmitEverything", {}, "entry")


def test_permits_staleness_and_cap() -> None:
    entries = [
        EnvironmentConfig(name="a", group_size=4),
        EnvironmentConfig(name="b", group_size=6, max_staleness=0),
    ]
    cfg = RunConfig(train=TrainConfig(batch_size=10), environments=entries)
    assert effective_group_size(cfg) == 6 and max_concurrent_rollouts(cfg) == 60
    assert max_concurrent_rollouts(RunConfig(train=TrainConfig(max_concurrent_rollouts=7))) == 7
    assert (entry_max_staleness(cfg, 0), entry_max_staleness(cfg, 1)) == (1, 0)
    assert step_cap(RunConfig(train=TrainConfig(batch_size=10, refill={"max_groups_per_step": 1.1}))) == 11
    assert step_cap(RunConfig(train=TrainConfig(batch_size=10, refill={"max_groups_per_step": 1.0}))) == 10
    assert step_cap(RunConfig(train=TrainConfig(batch_size=32))) == 96


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


def test_default_config_records_its_run_sampler_and_environment() -> None:
    sampler, environment = resolve_components(RunConfig())
    core = {"distribution": "platoon", "distribution_version": platoon.__version__, "entry_point": None}
    assert sampler.to_json() == {
        "kind": "task_sampler",
        "ref": "auto",
        "resolved": "platoon.policy.samplers.uniform:UniformSampler",
        "source": "platoon.policy.samplers.uniform:UniformSampler",
        **core,
        "core": "uniform",
        "level": "run",
        "environments": ["number-search"],
        "options": {"train": {}},
    }
    assert environment.to_json() == {
        "kind": "environment",
        "ref": "number_search",
        "resolved": "platoon.live.envs.number_search:NumberSearch",
        "source": "platoon.live.envs.number_search:NumberSearch",
        **core,
        "core": "number_search",
        "level": "entry",
        "environments": ["number-search"],
        "options": {"number-search": NumberSearchOptions().model_dump(mode="json")},
    }


def test_pass_rate_records_its_options_with_defaults() -> None:
    cfg = RunConfig(train=TrainConfig(task_sampler="pass_rate", task_sampler_options={"explore": 0.5}))
    [record] = [r for r in resolve_components(cfg) if r.kind == "task_sampler"]
    assert record.options == {
        "train": {
            "explore": 0.5,
            "max_draws_per_epoch": 3,
            "max_outstanding_per_task": None,
            "candidates": 4096,
            "seed": 0,
        }
    }


def test_entry_samplers_group_by_name_under_weighted() -> None:
    entries = [
        EnvironmentConfig(name="a", task_sampler="pass_rate"),
        EnvironmentConfig(name="b"),
        EnvironmentConfig(name="c", task_sampler="pass_rate", task_sampler_options={"seed": 3}),
    ]
    records = [r.to_json() for r in resolve_components(RunConfig(environments=entries)) if r.kind == "task_sampler"]
    assert [(r["ref"], r["core"], r["level"], r["environments"]) for r in records] == [
        ("auto", "weighted", "run", ["a", "b", "c"]),
        ("pass_rate", "pass_rate", "entry", ["a", "c"]),
        ("uniform", "uniform", "entry", ["b"]),
    ]
    assert records[1]["options"]["c"]["seed"] == 3 and records[1]["options"]["a"]["explore"] == 0.2


def test_rules_are_recorded_in_rule_mode_only() -> None:
    entries = [EnvironmentConfig(name="a"), EnvironmentConfig(name="b", group_admission="all")]
    cfg = RunConfig(train=TrainConfig(group_admission="informative"), environments=entries)
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
    assert [r for r in resolve_components(RunConfig()) if r.kind == "group_admission"] == []


def test_informative_needs_a_workflow_that_gives_verdicts() -> None:
    cfg = RunConfig(environments=[EnvironmentConfig(name="a", group_admission="informative")])
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
    cfg = RunConfig(
        train=TrainConfig(task_sampler=f"{plugin}_model", task_sampler_options={"depth": 3}),
        environments=entries,
    )
    with pytest.raises(ConfigError):
        resolve_components(cfg, workflow_gives_verdicts=False)
    records = {(r.kind, r.ref): r for r in resolve_components(cfg)}
    run = records[("task_sampler", f"{plugin}_model")]
    assert run.resolved == f"{plugin}:WithModel" and run.core is None
    assert run.options == {"train": {"depth": 3, "label": "x"}} and run.parsed["train"].depth == 3
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
    cfg = RunConfig(
        train=TrainConfig(task_sampler=f"{plugin}_model", task_sampler_options={"depth": 9, "label": 3}),
        environments=entries,
    )
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
    cfg = RunConfig(
        train=TrainConfig(task_sampler=f"{plugin}_model", task_sampler_options={"depth": 9}),
        environments=entries,
    )
    assert resolve_problems(cfg) == [
        f"train.task_sampler: {plugin}_model: depth 9 is too deep for batch_size 32",
    ]


def test_a_run_sampler_without_slots_refuses_entry_samplers(plugin: str) -> None:
    entries = [
        EnvironmentConfig(name="a", package=plugin, task_sampler="pass_rate"),
        EnvironmentConfig(name="b"),
    ]
    cfg = RunConfig(train=TrainConfig(task_sampler=f"{plugin}_noslots"), environments=entries)
    [line] = resolve_problems(cfg)
    assert line.startswith(f"environments.0.task_sampler: {plugin}_noslots hands no slots to entries")
    slots = RunConfig(train=TrainConfig(task_sampler=f"{plugin}_slots"), environments=entries)
    refs = [(r.ref, r.level, r.environments) for r in resolve_components(slots) if r.kind == "task_sampler"]
    assert refs == [
        (f"{plugin}_slots", "run", ("a", "b")),
        ("pass_rate", "entry", ("a",)),
        ("uniform", "entry", ("b",)),
    ]


def test_a_package_that_fails_to_import() -> None:
    cfg = RunConfig(environments=[EnvironmentConfig(name="a", package="no_such_package_xyz")])
    [line] = resolve_problems(cfg)
    assert line.startswith(
        "environments.0.package: cannot import package 'no_such_package_xyz': ModuleNotFoundError"
    )
