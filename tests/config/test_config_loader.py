"""load_config: YAML, overrides, and one report with every problem of a file, each at its key path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from platoon.config import ConfigError, RunConfig, load_config, load_config_warnings, to_yaml
from platoon.config.overrides import is_override, split_arguments


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), overrides)
    return info.value.problems


def test_none_is_the_embedded_default() -> None:
    assert load_config(None) == RunConfig()


def test_an_empty_file_is_the_default(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == RunConfig()


def test_five_mistakes_in_one_file(tmp_path: Path) -> None:
    text = """
        train:
          steps: ten
          task_order: auto
        environments:
          - name: a
            grup_size: 4
        model:
          lr: -1
        sim:
          rollout:
            duration: {dist: fixed, value_s: 1, mean_s: 2}
    """
    assert problems(tmp_path, text) == [
        "train.steps: must be an integer, got 'ten'",
        "train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler",
        "environments.0.grup_size: unknown key; did you mean 'group_size'?",
        "model.lr: must be above 0.0, got -1",
        "sim.rollout.duration.mean_s: unknown key",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus: 1", ["bogus: unknown key"]),
        ("trian: {}", ["trian: unknown key; did you mean 'train'?"]),
        ("train: {stpes: 3}", ["train.stpes: unknown key; did you mean 'steps'?"]),
        (
            "train: {refill: {max_groups: 2}}",
            ["train.refill.max_groups: unknown key; did you mean 'max_groups_per_step'?"],
        ),
        ("environments: [{name: a, colour: red}]", ["environments.0.colour: unknown key"]),
        ("model: {layers: 3}", ["model.layers: unknown key; did you mean 'n_layers'?"]),
        ("sim: {rollouts: {}}", ["sim.rollouts: unknown key; did you mean 'rollout'?"]),
        (
            "sim: {rollout: {duration: {dist: lognormal, median_s: 3, sigma: 1, mean: 2}}}",
            ["sim.rollout.duration.mean: unknown key; did you mean 'median_s'?"],
        ),
        (
            "sim: {rollout: {duration: {dist: fixed, valu_s: 3}}}",
            [
                "sim.rollout.duration.value_s: missing required key",
                "sim.rollout.duration.valu_s: unknown key; did you mean 'value_s'?",
            ],
        ),
    ],
)
def test_unknown_keys_at_every_level(tmp_path: Path, text: str, expected: list[str]) -> None:
    assert problems(tmp_path, text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "train: {task_order: weighted}",
        "train: {task_order: auto}",
        "train: {task_sampler: weighted, task_order: auto}",
        "train: {task_sampler: auto, task_order: weighted}",
    ],
)
def test_task_order_is_refused_alone_beside_task_sampler_and_as_auto(tmp_path: Path, text: str) -> None:
    assert problems(tmp_path, text) == [
        "train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler"
    ]


def test_task_order_via_override_is_prefixed(tmp_path: Path) -> None:
    assert problems(tmp_path, "", ("train.task_order=auto",)) == [
        "override train.task_order=auto: train.task_order: unknown key; platoon 0.4.0 removed it; use "
        "train.task_sampler"
    ]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("rollout_group_key", "unknown key; platoon 0.3.0 removed it; use train.label_by"),
        ("num_concurrent_rollout_workflow_workers", "unknown key; use train.max_concurrent_rollouts"),
        (
            "on_stale",
            "unknown key; not in this release: a stale group is dropped, and under a group admission rule "
            "the step takes another in its place",
        ),
    ],
)
def test_other_removed_keys_have_their_hints(tmp_path: Path, key: str, message: str) -> None:
    assert problems(tmp_path, f"train: {{{key}: x}}") == [f"train.{key}: {message}"]


def test_a_copied_0_2_defaults_dump_fails_on_task_order(tmp_path: Path) -> None:
    text = to_yaml(RunConfig()).replace(
        "  task_sampler: auto\n", "  task_sampler: auto\n  task_order: auto\n"
    )
    assert problems(tmp_path, text) == [
        "train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler"
    ]


def test_wrong_types_everywhere(tmp_path: Path) -> None:
    text = """
        train: {batch_size: [1], loss: {kl_coef: none}, straggler: 5}
        environments: [{name: a, group_size: 2.5, tasks: {a: 1}, env_options: []}]
        model: {device: gpu}
        sim: {trainer: {step_s: fast}}
    """
    assert problems(tmp_path, text) == [
        "train.batch_size: must be an integer, got a list",
        "train.loss.kl_coef: must be a number, got 'none'",
        "train.straggler: must be a mapping, got 5",
        "environments.0.group_size: must be an integer, got 2.5",
        "environments.0.tasks: must be a list, got a mapping",
        "environments.0.env_options: must be a mapping, got a list",
        "model.device: must be 'auto', 'cpu' or 'cuda', got 'gpu'",
        "sim.trainer.step_s: must be a number, got 'fast'",
    ]


def test_a_section_that_is_not_a_mapping(tmp_path: Path) -> None:
    assert problems(tmp_path, "train: 3\nenvironments: {name: a}") == [
        "train: must be a mapping, got 3",
        "environments: must be a list, got a mapping",
    ]


def test_durations_are_a_union_on_dist(tmp_path: Path) -> None:
    text = """
        sim:
          rollout:
            duration: {dist: gamma, shape: 2}
            fail_duration: {mean_s: 3}
            first_call_s: {dist: empirical}
            teardown_s: {dist: exponential, mean_s: 0}
    """
    assert problems(tmp_path, text) == [
        "sim.rollout.duration: dist must be one of 'fixed', 'exponential', 'lognormal', 'empirical', got 'gamma'",
        "sim.rollout.fail_duration: needs a dist: one of fixed, exponential, lognormal, empirical",
        "sim.rollout.first_call_s: give exactly one of file and values",
        "sim.rollout.teardown_s.mean_s: must be above 0.0, got 0",
    ]


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    [line] = problems(tmp_path, "train:\n  steps: [1, 2\n")
    assert line.startswith("<yaml>: line 3, column 1: ")


def test_a_list_at_the_top_is_refused(tmp_path: Path) -> None:
    assert problems(tmp_path, "- a\n") == [
        "<root>: must be a mapping of train, environments, model and sim, got a list"
    ]


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    [line] = info.value.problems
    assert line.startswith("<file>: cannot read ")


# --- overrides -------------------------------------------------------------------------------------------------


def test_overrides_are_yaml_typed_and_index_lists(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a}, {name: b}]")
    cfg = load_config(
        path,
        [
            "train.steps=7",
            "train.max_staleness=null",
            "train.task_sampler_options={}",
            "environments.1.group_size=4",
            "environments.0.tasks=[1, two]",
            "train.loss.kl_coef=0.5",
            "train.label_by=",
        ],
    )
    assert cfg.train.steps == 7 and cfg.train.max_staleness is None and cfg.train.label_by is None
    assert cfg.environments[1].group_size == 4 and cfg.environments[0].tasks == ["1", "two"]
    assert cfg.train.loss.kl_coef == 0.5


def test_an_override_reaches_the_default_entry() -> None:
    cfg = load_config(None, ["environments.0.group_size=4"])
    assert cfg.environments[0].name == "number-search" and cfg.environments[0].group_size == 4


def test_an_override_may_append_one_entry() -> None:
    cfg = load_config(None, ["environments.1.name=extra", "environments.1.group_size=2"])
    assert [e.name for e in cfg.environments] == ["number-search", "extra"]


def test_plus_equals_appends_one_item_to_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, tasks: ['1']}]")
    cfg = load_config(path, ["environments.0.tasks+=2", "environments+={name: b, group_size: 4}"])
    assert cfg.environments[0].tasks == ["1", "2"]
    assert [(e.name, e.group_size) for e in cfg.environments] == [("a", 8), ("b", 4)]


def test_plus_equals_on_a_missing_or_null_list_starts_from_its_default() -> None:
    cfg = load_config(None, ["environments+={name: extra}", "environments.0.tasks+=7"])
    assert [e.name for e in cfg.environments] == ["number-search", "extra"]
    assert cfg.environments[0].tasks == ["7"]  # tasks: null appends to an empty list


def test_plus_equals_on_something_not_a_list_is_refused(tmp_path: Path) -> None:
    assert problems(tmp_path, "", ("train.batch_size+=1",)) == [
        "override train.batch_size+=1: train.batch_size is a int, not a list to append to"
    ]


@pytest.mark.parametrize(
    ("argument", "override"),
    [
        ("train.batch_size=0", True),
        ("environments.0.name=x", True),
        ("environments+={name: b}", True),
        ("train.label_by=", True),
        ("run.yaml", False),
        ("configs/a=b.yaml", False),  # a path's left side is no dotted key: a missing file, not an override
        ("=3", False),
        ("a b=1", False),
    ],
)
def test_an_argument_is_an_override_when_its_left_side_is_a_dotted_key(argument: str, override: bool) -> None:
    assert is_override(argument) is override


def test_an_existing_file_named_like_an_override_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a=b.yaml").write_text("train: {steps: 2}\n")
    assert split_arguments(["a=b.yaml", "c=d.yaml", "train.steps=3"]) == (
        ["a=b.yaml"], ["c=d.yaml", "train.steps=3"]
    )


def test_an_override_names_its_problem(tmp_path: Path) -> None:
    assert problems(tmp_path, "", ("train.steps=many",)) == [
        "override train.steps=many: train.steps: must be an integer, got 'many'"
    ]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.steps", "override train.steps: expected dotted.key=value"),
        ("=3", "override =3: expected dotted.key=value"),
        ("train..steps=3", "override train..steps=3: expected dotted.key=value"),
        (
            "environments.5.name=x",
            "override environments.5.name=x: environments has 1 items; index 5 is past its end",
        ),
        (
            "environments.x.name=x",
            "override environments.x.name=x: environments is a list: index it with a number",
        ),
        ("train.steps.x=1", "override train.steps.x=1: train.steps is a int, not a mapping or a list"),
        ("train.steps=[1", "override train.steps=[1: the value is not YAML"),
    ],
)
def test_malformed_overrides(tmp_path: Path, override: str, message: str) -> None:
    [line] = problems(tmp_path, "", (override,))
    assert line.startswith(message), line


def test_override_problems_join_the_files(tmp_path: Path) -> None:
    assert problems(tmp_path, "train: {steps: 0}", ("model.kind=big",)) == [
        "train.steps: must be at least 1, got 0",
        "override model.kind=big: model.kind: must be 'tiny' or 'hf', got 'big'",
    ]


# --- entries' sim overrides ------------------------------------------------------------------------------------


def test_entry_sim_is_validated_merged_onto_the_run_sim(tmp_path: Path) -> None:
    text = """
        sim: {rollout: {duration: {dist: fixed, value_s: 5}}}
        environments:
          - name: a
            sim: {rollout: {error_rate: 2, duration: {dist: lognormal, median_s: 3}}, trainer: {step: 1}}
          - name: b
            sim: {rollout: {model_calls: 4}}
    """
    assert problems(tmp_path, text) == [
        "environments.0.sim.trainer: the run's alone; set it in the run's sim block",
        "environments.0.sim.rollout.duration.sigma: missing required key",
        "environments.0.sim.rollout.error_rate: must be at most 1.0, got 2",
        "environments.0.sim.trainer.step: unknown key; did you mean 'step_s'?",
    ]


def test_a_run_sim_problem_is_reported_once(tmp_path: Path) -> None:
    text = """
        sim: {rollout: {duration: {dist: fixed, value_s: -5}}}
        environments: [{name: a, sim: {rollout: {model_calls: 4}}}]
    """
    assert problems(tmp_path, text) == ["sim.rollout.duration.value_s: must be at least 0.0, got -5"]


def test_relative_files_are_relative_to_the_config(tmp_path: Path) -> None:
    sub = tmp_path / "cfg"
    sub.mkdir()
    (sub / "tasks.csv").write_text("task_id,pass_rate\nx,0.5\n")
    (sub / "d.txt").write_text("1.5\n")
    (tmp_path / "t.txt").write_text("2.5\n")
    text = """
        sim:
          tasks: tasks.csv
          learning: {enabled: false}
          rollout: {duration: {dist: empirical, file: d.txt}}
        environments: [{name: a, sim: {rollout: {teardown_s: {dist: empirical, file: ABS}}}}]
    """.replace("ABS", str(tmp_path / "t.txt"))
    cfg = load_config(write(sub, text))
    assert cfg.sim.tasks == str(sub / "tasks.csv")
    assert cfg.sim.rollout.duration.file == str(sub / "d.txt")
    assert cfg.environments[0].sim["rollout"]["teardown_s"]["file"] == str(tmp_path / "t.txt")


# --- warnings and strict resolution ----------------------------------------------------------------------------


def test_rule_mode_warns_of_a_loss_not_zero_at_zero_advantages() -> None:
    cfg = load_config(None, ["train.group_admission=informative", "train.loss.kl_coef=0.1"])
    [warning] = load_config_warnings(cfg)
    assert warning.startswith("train.loss: kl_coef 0.1 and entropy_coef 0 train terms")
    assert load_config_warnings(load_config(None, ["train.loss.kl_coef=0.1"])) == []
    assert load_config_warnings(load_config(None, ["train.group_admission=informative"])) == []


def test_strict_resolve_adds_stage_two(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {task_sampler: 'json:NoSuchClass'}")
    assert load_config(path).train.task_sampler == "json:NoSuchClass"
    with pytest.raises(ConfigError) as info:
        load_config(path, strict_resolve=True)
    assert info.value.problems == ["train.task_sampler: 'json' has no 'NoSuchClass' (for 'json:NoSuchClass')"]
