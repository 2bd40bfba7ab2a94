"""load_config: YAML, overrides, and one report with every problem of a file, each at its key path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from config_kit import complete

from platoon.config import ConfigError, load_config, load_config_warnings, to_yaml
from platoon.config.models import EMBEDDED_DEFAULT, default_config, schema_defaults
from platoon.config.overrides import is_override, split_arguments


def to_dict(cfg):
    return cfg.model_dump(mode="json")


def write(tmp_path: Path, text: str, name: str = "run.yaml", *, raw: bool = False) -> Path:
    """Write ``text`` as a config: completed by ``complete`` unless ``raw``."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text) if raw else complete(text))
    return path


def problems(tmp_path: Path, text: str, overrides: tuple[str, ...] = (), *, raw: bool = False) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text, raw=raw), overrides)
    return info.value.problems


def test_none_is_the_embedded_default() -> None:
    assert load_config(None) == default_config()
    assert load_config(None).train.max_training_steps == EMBEDDED_DEFAULT["train"]["max_training_steps"]


def test_a_file_sets_its_model_and_renderer_and_the_rest_is_default(tmp_path: Path) -> None:
    assert problems(tmp_path, "", raw=True) == ["train: missing required key"]
    assert problems(tmp_path, "train: {}", raw=True) == [
        "train.model_name: missing required key",
        "train.renderer_name: missing required key",
    ]
    text = "train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 100}"
    # a file starts from the schema's defaults (0.4.0's), not from the embedded demo
    loaded = load_config(write(tmp_path, text, raw=True))
    assert loaded == schema_defaults().model_copy(update={"train": schema_defaults().train.model_copy(
        update={"max_training_steps": 100})})
    assert loaded.train.optimizer.learning_rate != default_config().train.optimizer.learning_rate


def test_an_entry_without_env_is_warned_of_and_names_the_game_it_trains(tmp_path: Path) -> None:
    [warning] = load_config_warnings(load_config(write(tmp_path, "environments: [{name: a}, {name: b, env: "
                                                                 "platoon-number-search}]")))
    assert warning.startswith("environments.0: no env given, so it trains platoon-number-search, the built-in game")
    assert load_config_warnings(load_config(write(tmp_path, "log_path: runs"))) == []  # no entries written: the default
    recorded = load_config(None, data=to_dict(load_config(write(tmp_path, "environments: [{env: platoon-number-search}]"))))
    assert load_config_warnings(recorded) == []  # a run's lock keeps the env its config named


def test_the_shown_default_trains_as_the_embedded_default(tmp_path: Path) -> None:
    """``config show`` with no config writes a file that loads to the embedded default (its log_path aside), and passes
    ``config validate --strict``: no key it writes is warned about."""
    from platoon.config.config_warnings import config_warnings
    from platoon.config.show import shown

    for defaults in (False, True):
        path = tmp_path / f"shown-{defaults}.yaml"
        path.write_text(shown(load_config(None, ["log_path=runs"]), defaults=defaults))
        cfg = load_config(path, needs_log_path=True, strict_resolve=True)
        assert cfg.model_copy(update={"log_path": None}) == default_config(), defaults
        assert config_warnings(cfg) == [], defaults


def test_log_path_is_required_where_asked_for(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    assert load_config(path).log_path is None
    with pytest.raises(ConfigError) as info:
        load_config(path, needs_log_path=True)
    [line] = info.value.problems
    assert line.startswith("log_path: missing required key")
    assert load_config(path, ["log_path=logs"], needs_log_path=True).log_path == "logs"


def test_five_mistakes_in_one_file(tmp_path: Path) -> None:
    text = """
        train:
          max_training_steps: ten
          task_order: auto
        environments:
          - name: a
            workflow_config: {grup_size: 4}
        model:
          lr: -1
        sim:
          rollout:
            duration: {dist: fixed, value_s: 1, mean_s: 2}
    """
    assert problems(tmp_path, text) == [
        "train.max_training_steps: must be an integer, got 'ten'",
        "train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler",
        "environments.0.workflow_config.grup_size: unknown key; did you mean 'group_size'?",
        "model.lr: unknown key; use train.optimizer.learning_rate",
        "sim.rollout.duration.mean_s: unknown key",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus: 1", ["bogus: unknown key"]),
        ("trian: {}", ["trian: unknown key; did you mean 'train'?"]),
        ("train: {max_training_step: 3}", ["train.max_training_step: unknown key; did you mean 'max_training_steps'?"]),
        ("train: {workflow_config: {group_sise: 3}}",
         ["train.workflow_config.group_sise: unknown key; did you mean 'group_size'?"]),
        ("checkpoint: {evrey: 3}", ["checkpoint.evrey: unknown key; did you mean 'every'?"]),
        (
            "train: {refill: {max_groups: 2}}",
            ["train.refill.max_groups: unknown key; did you mean 'max_groups_per_step'?"],
        ),
        ("environments: [{name: a, xyzzy: red}]", ["environments.0.xyzzy: unknown key"]),
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
    ("text", "expected"),
    [
        ("train: {steps: 3}", "train.steps: unknown key; use train.max_training_steps (or train.num_epochs)"),
        ("train: {checkpoint_every: 3}", "train.checkpoint_every: unknown key; use checkpoint.recovery_every"),
        ("train: {keep_checkpoints: 3}", "train.keep_checkpoints: unknown key; use checkpoint.keep_recovery"),
        ("train: {eval_every: 3}", "train.eval_every: unknown key; use eval.every"),
        ("train: {straggler: {timeout_s: 3}}",
         "train.straggler: unknown key; use train.workflow_config.straggler_timeout_seconds"),
        ("environments: [{group_size: 4}]",
         "environments.0.group_size: unknown key; use the entry's workflow_config.group_size"),
        ("environments: [{env_options: {}}]", "environments.0.env_options: unknown key; use service_kwargs"),
        ("environments: [{split: train}]", "environments.0.split: unknown key; use dataset_kwargs.split_name"),
        ("environments: [{eval_split: val}]",
         "environments.0.eval_split: unknown key; use eval_dataset_kwargs.split_name"),
        ("model: {kind: tiny}", "model.kind: unknown key; use train.model_name"),
        ("model: {path: ckpt}", "model.path: unknown key; use train.model_name"),
        ("model: {temperature: 0.5}",
         "model.temperature: unknown key; use train.workflow_config.rollout_config.inference_params.temperature"),
        ("model: {max_new_tokens: 4}", "model.max_new_tokens: unknown key; use train.workflow_config.rollout_config."
                                       "inference_params.max_completion_tokens"),
    ],
)
def test_keys_this_release_renamed_name_their_new_place(tmp_path: Path, text: str, expected: str) -> None:
    [line] = problems(tmp_path, text)
    assert line.startswith(expected), line


def test_environments_as_a_mapping_is_refused(tmp_path: Path) -> None:
    assert problems(tmp_path, "environments: {easy: {env: platoon-number-search}}") == [
        "environments: must be a list of entries (a mapping is refused: write '- name: ...' items)"
    ]


@pytest.mark.parametrize("section", ["checkpoint", "eval"])
def test_strategy_none_names_its_0_3_replacement(tmp_path: Path, section: str) -> None:
    [line] = problems(tmp_path, f"{section}: {{strategy: none}}")
    assert line.startswith(f"{section}.strategy: 'none' is not one of 'step', 'epoch'; platoon 0.3.0 removed it; use "
                           f"{section}.every: 0, which ")


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
        (
            "num_concurrent_rollout_workflow_workers",
            "unknown key; platoon 0.3.0 removed it; use train.max_concurrent_rollouts",
        ),
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
    text = to_yaml(default_config()).replace(
        "  task_sampler: auto\n", "  task_sampler: auto\n  task_order: auto\n"
    )
    assert problems(tmp_path, text, raw=True) == [
        "train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler"
    ]


def test_wrong_types_everywhere(tmp_path: Path) -> None:
    text = """
        train: {batch_size: [1], loss_fn_config: {kl_coef: none}, workflow_config: 5}
        environments: [{name: a, workflow_config: {group_size: 2.5}, tasks: {a: 1}, service_kwargs: []}]
        model: {device: gpu}
        sim: {trainer: {step_s: fast}}
    """
    assert problems(tmp_path, text) == [
        "train.batch_size: must be an integer, got a list",
        "train.workflow_config: must be a mapping, got 5",
        "train.loss_fn_config.kl_coef: must be a number, got 'none'",
        "environments.0.workflow_config.group_size: must be an integer, got 2.5",
        "environments.0.tasks: must be a list, got a mapping",
        "environments.0.service_kwargs: must be a mapping, got a list",
        "model.device: must be 'auto', 'cpu' or 'cuda', got 'gpu'",
        "sim.trainer.step_s: must be a number, got 'fast'",
    ]


def test_a_section_that_is_not_a_mapping(tmp_path: Path) -> None:
    assert problems(tmp_path, "train: 3\nenvironments: [3]\ncheckpoint: [1]") == [
        "train: must be a mapping, got 3",
        "environments.0: must be a mapping, got 3",
        "checkpoint: must be a mapping, got a list",
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
    [line] = problems(tmp_path, "train:\n  max_training_steps: [1, 2\n", raw=True)
    assert line.startswith("<yaml>: line 3, column 1: ")


def test_a_list_at_the_top_is_refused(tmp_path: Path) -> None:
    assert problems(tmp_path, "- a\n", raw=True) == [
        "<root>: must be a mapping of train, environments, model and sim, got a list"
    ]


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    [line] = info.value.problems
    assert line.startswith("<file>: cannot read ")


# --- overrides -------------------------------------------------------------------------------------------------


def test_overrides_are_yaml_typed_and_index_lists(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {max_staleness: 2}\nenvironments: [{name: a}, {name: b}]")
    cfg = load_config(
        path,
        [
            "train.max_training_steps=7",
            "train.max_staleness=null",
            "train.task_sampler_options={}",
            "environments.1.workflow_config.group_size=4",
            "environments.0.tasks=[1, two]",
            "train.loss_fn_config.kl_coef=0.5",
            "train.label_by=",
        ],
    )
    assert cfg.train.max_training_steps == 7 and cfg.train.max_staleness is None and cfg.train.label_by is None
    assert cfg.environments[1].workflow_config.group_size == 4 and cfg.environments[0].tasks == ["1", "two"]
    # An override of one key adds it to the mapping in effect (here the default); a file's mapping replaces it whole.
    assert cfg.train.loss_fn_config == {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0, "kl_coef": 0.5}


def test_an_override_reaches_the_default_entry() -> None:
    cfg = load_config(None, ["environments.0.workflow_config.group_size=4"])
    assert cfg.environments[0].label == "default" and cfg.environments[0].workflow_config.group_size == 4


def test_an_override_may_append_one_entry() -> None:
    # a mixture's entries each need a name, so the default entry gets one too
    cfg = load_config(None, ["environments.0.name=first", "environments.1.name=extra",
                             "environments.1.workflow_config.group_size=2"])
    assert [e.name for e in cfg.environments] == ["first", "extra"]


def test_an_override_sets_only_its_own_key(tmp_path: Path) -> None:
    # the section an override reaches into starts empty: the defaults do not stand in for what the file lacks
    assert problems(tmp_path, "", ("train.batch_size=4",), raw=True) == [
        "train.model_name: missing required key",
        "train.renderer_name: missing required key",
    ]
    cfg = load_config(None, ["environments.0.workflow_config.group_size=4", "train.workflow_config.group_size=2"])
    assert cfg.environments[0].model_fields_set == {"env", "service_kwargs", "workflow_config"}  # the first two: the demo's
    assert cfg.train.workflow_config.model_fields_set == {"group_size"}
    assert load_config_warnings(cfg) == []
    # a distribution's field keeps the default distribution it belongs to
    duration = load_config(None, ["sim.rollout.duration.median_s=3"]).sim.rollout.duration
    assert (duration.dist, duration.median_s, duration.sigma) == ("lognormal", 3.0, 0.5)


def test_plus_equals_appends_one_item_to_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, tasks: ['1']}]")
    cfg = load_config(path, ["environments.0.tasks+=2", "environments+={name: b, workflow_config: {group_size: 4}}"])
    assert cfg.environments[0].tasks == ["1", "2"]
    assert [(e.name, e.workflow_config.group_size) for e in cfg.environments] == [("a", None), ("b", 4)]


def test_plus_equals_on_a_missing_or_null_list_starts_from_its_default() -> None:
    cfg = load_config(None, ["environments.0.name=first", "environments+={name: extra}", "environments.0.tasks+=7"])
    assert [e.name for e in cfg.environments] == ["first", "extra"]
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
    assert problems(tmp_path, "", ("train.max_training_steps=many",)) == [
        "override train.max_training_steps=many: train.max_training_steps: must be an integer, got 'many'"
    ]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.batch_size", "override train.batch_size: expected dotted.key=value"),
        ("=3", "override =3: expected dotted.key=value"),
        ("train..batch_size=3", "override train..batch_size=3: expected dotted.key=value"),
        (
            "environments.5.name=x",
            "override environments.5.name=x: environments has 1 items; index 5 is past its end",
        ),
        (
            "environments.x.name=x",
            "override environments.x.name=x: environments is a list: index it with a number",
        ),
        (
            "train.max_training_steps.x=1",
            "override train.max_training_steps.x=1: train.max_training_steps is a int, not a mapping or a list",
        ),
        ("train.batch_size=[1", "override train.batch_size=[1: the value is not YAML"),
    ],
)
def test_malformed_overrides(tmp_path: Path, override: str, message: str) -> None:
    [line] = problems(tmp_path, "", (override,))
    assert line.startswith(message), line


def test_override_problems_join_the_files(tmp_path: Path) -> None:
    assert problems(tmp_path, "train: {max_training_steps: 0}", ("model.device=gpu",)) == [
        "train.max_training_steps: must be at least 1, got 0",
        "override model.device=gpu: model.device: must be 'auto', 'cpu' or 'cuda', got 'gpu'",
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


def test_rule_mode_warns_of_a_loss_not_zero_at_zero_advantages(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    cfg = load_config(path, ["train.group_admission=informative", "train.loss_fn_config.kl_coef=0.1"])
    [warning] = load_config_warnings(cfg)
    assert warning.startswith("train.loss_fn_config: kl_coef 0.1 and entropy_coef 0 train terms")
    assert load_config_warnings(load_config(path, ["train.loss_fn_config.kl_coef=0.1"])) == []
    assert load_config_warnings(load_config(path, ["train.group_admission=informative"])) == []
    # the embedded default's entropy bonus is such a term
    [warning] = load_config_warnings(load_config(None, ["train.group_admission=informative"]))
    assert warning.startswith("train.loss_fn_config: kl_coef 0 and entropy_coef 0.003 train terms")


def test_clip_thresholds_changed_for_importance_sampling_are_warned_of(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    cfg = load_config(path, ["train.loss_fn=importance_sampling", "train.loss_fn_config.clip_high_threshold=1.2"])
    assert load_config_warnings(cfg) == [
        "train.loss_fn_config: importance_sampling does not clip the ratio; clip_high_threshold 1.2 takes effect "
        "only under ppo or cispo"]
    assert load_config_warnings(load_config(path, ["train.loss_fn=importance_sampling"])) == []


def test_strict_resolve_adds_stage_two(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {task_sampler: 'json:NoSuchClass'}")
    assert load_config(path).train.task_sampler == "json:NoSuchClass"
    with pytest.raises(ConfigError) as info:
        load_config(path, strict_resolve=True)
    assert info.value.problems == ["train.task_sampler: 'json' has no 'NoSuchClass' (for 'json:NoSuchClass')"]


def test_a_recorded_config_warns_only_of_the_no_effect_keys_its_config_set() -> None:
    from platoon.config.loader import config_from_lock

    recorded = load_config(None, ["train.lora_rank=8"]).model_dump(mode="json")  # lock.json names every key
    cfg = config_from_lock({"config": recorded}, "lock.json")
    assert cfg.train.lora_rank == 8 and cfg.train.num_microbatches == 1
    assert [w.split(":")[0] for w in load_config_warnings(cfg)] == ["train.lora_rank"]
    assert load_config_warnings(config_from_lock({"config": default_config().model_dump(mode="json")}, "x")) == []
