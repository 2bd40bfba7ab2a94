"""Stage 1's rules between fields: names, core options, samplers and weights, rule mode, permits, labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_kit import complete

from platoon.config import (
    ConfigError,
    EnvironmentConfig,
    RunConfig,
    TrainConfig,
    check_config,
    load_config,
    registry,
)
from platoon.config.loader import config_problems
from platoon.config.models import default_config

NOT_ONE_OF_SAMPLERS = (
    "is not one of 'auto', 'weighted', 'uniform', 'pass_rate', a name an environment's package registers, or "
    "module:Class"
)


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(complete(text))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


def loads(tmp_path: Path, text: str) -> RunConfig:
    path = tmp_path / "run.yaml"
    path.write_text(complete(text))
    return load_config(path)


def train(**keys: object) -> TrainConfig:
    """A TrainConfig built in code: the required keys and ``keys``."""
    return TrainConfig(**{"model_name": "tiny", "renderer_name": "role_colon", **keys})


# --- names -----------------------------------------------------------------------------------------------------


def test_unresolvable_names_are_refused_at_load(tmp_path: Path) -> None:
    text = """
        train: {task_sampler: pass-rate, group_admission: informatve}
        environments:
          - {name: a, task_sampler: thompson, group_admission: strict, env: nethack}
    """
    assert problems(tmp_path, text) == [
        f"train.task_sampler: 'pass-rate' {NOT_ONE_OF_SAMPLERS}; did you mean 'pass_rate'?",
        "train.group_admission: 'informatve' is not one of 'all', 'informative', a name an environment's package "
        "registers, or module:Class; did you mean 'informative'?",
        "environments.0.task_sampler: 'thompson' is not one of 'uniform', 'pass_rate', a name an environment's "
        "package registers, or module:Class",
        "environments.0.group_admission: 'strict' is not one of 'all', 'informative', a name an environment's "
        "package registers, or module:Class",
        "environments.0.env: 'nethack' is not one of 'platoon-number-search', a name an environment's package "
        "registers, or module:Class",
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("platoon-number-search@2", "environments.0.env: platoon-number-search is at version 1, not '2'"),
        (
            "number_search",
            "environments.0.env: 'number_search' is not one of 'platoon-number-search', a name an environment's "
            "package registers, or module:Class; did you mean 'platoon-number-search'?",
        ),
    ],
)
def test_the_core_environment_is_named_as_0_4_names_it(tmp_path: Path, env: str, expected: str) -> None:
    assert problems(tmp_path, f"environments: [{{env: '{env}'}}]") == [expected]
    assert loads(tmp_path, "environments: [{env: platoon-number-search@1}]").environments[0].env.endswith("@1")


def test_an_empty_name_is_unresolvable(tmp_path: Path) -> None:
    assert problems(tmp_path, "train: {task_sampler: ''}") == [
        f"train.task_sampler: '' {NOT_ONE_OF_SAMPLERS}"
    ]


def test_a_package_defers_names_to_stage_two(tmp_path: Path) -> None:
    cfg = loads(
        tmp_path,
        """
        train: {task_sampler: mine, task_sampler_options: {x: 1}, group_admission: theirs}
        environments: [{name: a, package: some_pkg, env: custom}, {name: b, task_sampler: other}]
        """,
    )
    assert cfg.train.task_sampler == "mine"


def test_module_class_and_registered_names_pass_stage_one(tmp_path: Path) -> None:
    class Known:
        pass

    registry.register("task_sampler", "known_now", Known)
    try:
        cfg = loads(tmp_path, "train: {task_sampler: known_now, group_admission: 'pkg.mod:Rule'}")
    finally:
        registry.unregister("task_sampler", "known_now")
    assert cfg.train.group_admission == "pkg.mod:Rule"


@pytest.mark.parametrize("name", ["auto", "weighted"])
def test_an_entry_may_not_name_auto_or_weighted(tmp_path: Path, name: str) -> None:
    [line] = problems(tmp_path, f"environments: [{{name: a, task_sampler: {name}}}, {{name: b}}]")
    assert line.startswith(f"environments.0.task_sampler: '{name}' shares the run's slots among entries")


# --- core options ----------------------------------------------------------------------------------------------


def test_core_sampler_options_are_checked_at_load(tmp_path: Path) -> None:
    text = """
        train:
          task_sampler: pass_rate
          task_sampler_options: {explore: 2, max_draws_per_epoch: 0, candidates: true, seed: x, cands: 1}
    """
    assert problems(tmp_path, text) == [
        "train.task_sampler_options.explore: must be between 0 and 1, got 2",
        "train.task_sampler_options.max_draws_per_epoch: must be an integer from 1, or null, got 0",
        "train.task_sampler_options.candidates: must be an integer from 1, got True",
        "train.task_sampler_options.seed: must be an integer, got 'x'",
        "train.task_sampler_options.cands: unknown key; did you mean 'candidates'?",
    ]


@pytest.mark.parametrize("name", ["auto", "weighted", "uniform"])
def test_auto_weighted_and_uniform_take_no_options(tmp_path: Path, name: str) -> None:
    assert problems(tmp_path, f"train: {{task_sampler: {name}, task_sampler_options: {{a: 1}}}}") == [
        f"train.task_sampler_options: '{name}' takes no options; leave task_sampler_options out"
    ]


def test_entry_sampler_options_under_weighted(tmp_path: Path) -> None:
    text = """
        train: {task_sampler: weighted}
        environments:
          - {name: a, task_sampler: pass_rate, task_sampler_options: {explore: -0.1}}
          - {name: b, task_sampler_options: {explore: 0.1}}
    """
    assert problems(tmp_path, text) == [
        "environments.0.task_sampler_options.explore: must be between 0 and 1, got -0.1",
        "environments.1.task_sampler_options: 'uniform' takes no options; leave task_sampler_options out",
    ]


def test_admission_options(tmp_path: Path) -> None:
    text = """
        train: {group_admission: all, group_admission_options: {band: [0.1, 0.9]}}
        environments:
          - {name: a, group_admission: informative, group_admission_options: {band: [0.9, 0.1]}}
          - {name: b, group_admission: informative, group_admission_options: {bands: [0.1, 0.9]}}
          - {name: c, group_admission_options: {band: [0.2, 0.8]}}
    """
    assert problems(tmp_path, text) == [
        "train.group_admission_options: 'all' takes no options; leave group_admission_options out",
        "environments.0.group_admission_options.band: must be two numbers lo < hi between 0 and 1, got [0.9, 0.1]",
        "environments.1.group_admission_options.bands: unknown key; did you mean 'band'?",
        "environments.2.group_admission_options: set without the entry's group_admission: the options go with the "
        "rule they configure; set environments.2.group_admission too, or move them to train.group_admission_options",
    ]


# --- samplers and entries --------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["uniform", "pass_rate"])
def test_a_run_sampler_over_every_task_refuses_entry_settings(tmp_path: Path, run: str) -> None:
    text = f"""
        train: {{task_sampler: {run}}}
        environments:
          - {{name: a, weight: tasks}}
          - {{name: b, task_sampler: uniform}}
          - {{name: c, task_sampler_options: {{x: 1}}}}
    """
    lines = problems(tmp_path, text)
    assert [line.split(":")[0] for line in lines] == [
        "environments.0.weight",
        "environments.1.task_sampler",
        "environments.2.task_sampler_options",
    ]
    assert all("use train.task_sampler: weighted" in line for line in lines)


def test_pass_rate_refuses_groups_of_one(tmp_path: Path) -> None:
    run = problems(
        tmp_path,
        "train: {task_sampler: pass_rate}\nenvironments: [{name: a, workflow_config: {group_size: 1}}, {name: b}]",
    )
    assert run == [  # at the sampler's key, as platoon 0.4.0 names it
        "train.task_sampler: pass_rate chooses tasks likely to mix passes and failures, which a group of one "
        "never does (environments[a] has group_size 1); use uniform, or a group size of 2 or more"
    ]
    entry = problems(
        tmp_path,
        "train: {workflow_config: {group_size: 1}}\nenvironments: [{name: a, task_sampler: pass_rate}, {name: b}]",
    )
    assert entry == [
        "environments.0.task_sampler: pass_rate chooses tasks likely to mix passes and failures, which a group of one "
        "never does (environments[a] has group_size 1); use uniform, or a group size of 2 or more"
    ]


# --- rule mode, permits, labels --------------------------------------------------------------------------------


def test_num_minibatches_beside_a_rule(tmp_path: Path) -> None:
    [line] = problems(
        tmp_path, "train: {num_minibatches: 4}\nenvironments: [{name: a, group_admission: informative}]"
    )
    assert line.startswith(
        "train.num_minibatches: takes 4 optimizer steps a batch, and a group admission rule (informative) makes short"
    )
    assert line.endswith("set num_minibatches: 1")
    assert loads(tmp_path, "train: {num_minibatches: 4}").train.num_minibatches == 4


def test_every_entry_all_is_not_rule_mode(tmp_path: Path) -> None:
    text = "train: {num_minibatches: 2, group_admission: informative}\nenvironments: [{name: a, group_admission: all}]"
    assert loads(tmp_path, text).train.num_minibatches == 2


def test_duplicate_names_permits_quorum_and_labels(tmp_path: Path) -> None:
    text = """
        train:
          max_concurrent_rollouts: 6
          workflow_config: {straggler_timeout_seconds: 60, straggler_quorum: 5, straggler_policies: {gone: {}}}
          rollout_group_limits: {a/x: 2, nope: 1}
        environments:
          - {name: a/x, workflow_config: {group_size: 4}}
          - {name: b}
          - {name: a/x, workflow_config: {group_size: 2}}
        model: {d_model: 30, n_heads: 4}
    """
    assert problems(tmp_path, text) == [
        "environments.2.name: 'a/x' is already the name of environments.0",
        "train.max_concurrent_rollouts: 6 permits cannot hold one group of environments.1 (group_size 8); set at "
        "least 8",
        "train.workflow_config.straggler_quorum: 5 is more than the group size of environments.0, 4",
        "train.workflow_config.straggler_quorum: 5 is more than the group size of environments.2, 2",
        "train.rollout_group_limits.nope: no environment entry is named 'nope' (while label_by is null, labels are "
        "entry names)",
        "train.workflow_config.straggler_policies.gone: no environment entry is named 'gone' (while label_by is "
        "null, labels are entry names)",
        "model.d_model: 30 is not a multiple of n_heads (4)",
    ]


def test_a_mixtures_entries_each_need_a_unique_name(tmp_path: Path) -> None:
    text = "environments: [{name: a}, {}, {name: a}, {name: b}, {name: b}]"
    assert problems(tmp_path, text) == [
        "environments.1.name: a mixture's entries each need a unique name",
        "environments.2.name: 'a' is already the name of environments.0",
        "environments.4.name: 'b' is already the name of environments.3",
    ]
    assert loads(tmp_path, "environments: [{}]").environments[0].label == "default"
    [line] = problems(tmp_path, "environments: [{name: 'a::b'}]")
    assert line.startswith("environments.0.name: must not contain '::'")


def test_a_mixtures_weights_are_all_numbers_or_all_tasks(tmp_path: Path) -> None:
    assert problems(tmp_path, "environments: [{name: a, weight: 2}, {name: b}, {name: c, weight: 1}]") == [
        "environments.1.weight: a mixture's weights are all numbers or all 'tasks'; environments.0 sets 2.0"
    ]
    assert problems(tmp_path, "environments: [{name: a}, {name: b, weight: 3}]") == [
        "environments.1.weight: a mixture's weights are all numbers or all 'tasks'; environments.0 sets 'tasks'"
    ]
    assert [e.weight for e in loads(tmp_path, "environments: [{name: a}, {name: b}]").environments] == [
        "tasks", "tasks"
    ]
    assert [e.weight for e in loads(tmp_path, "environments: [{name: a, weight: 1}, {name: b, weight: 3}]")
            .environments] == [1.0, 3.0]


def test_a_straggler_quorum_needs_a_timeout(tmp_path: Path) -> None:
    text = """
        train: {workflow_config: {straggler_quorum: 3}}
        environments:
          - {name: a, workflow_config: {straggler_quorum: 2}}
          - {name: b, workflow_config: {straggler_timeout_seconds: 30}}
    """
    assert problems(tmp_path, text) == [
        "train.workflow_config.straggler_quorum: needs straggler_timeout_seconds (the quorum starts the straggler "
        "clock)",
        "environments.0.workflow_config.straggler_quorum: needs straggler_timeout_seconds (the entry's or the run's)",
    ]
    ok = loads(tmp_path, "train: {workflow_config: {straggler_timeout_seconds: 30, straggler_quorum: 3}}")
    assert ok.train.workflow_config.straggler_quorum == 3


def test_min_successful_group_size_lies_within_the_group(tmp_path: Path) -> None:
    text = """
        train: {workflow_config: {group_size: 4, min_successful_group_size: 5}}
        environments:
          - {name: a, workflow_config: {group_size: 8}}
          - {name: b, workflow_config: {min_successful_group_size: 3, group_size: 2}}
          - {name: c}
    """
    assert problems(tmp_path, text) == [
        "environments.1.workflow_config.min_successful_group_size: 3 is more than the group size of "
        "environments.1, 2; it must lie in [1, group_size]",
        "train.workflow_config.min_successful_group_size: 5 is more than the group size of environments.2, 4; it "
        "must lie in [1, group_size]",
    ]
    cfg = loads(tmp_path, "train: {workflow_config: {group_size: 4, min_successful_group_size: 4}}")
    assert cfg.train.workflow_config.min_successful_group_size == 4


def test_a_split_the_environment_lacks_is_refused(tmp_path: Path) -> None:
    text = """
        environments:
          - {name: a, dataset_kwargs: {split_name: heldout}}
          - {name: b, dataset_kwargs: {split_name: [train, val]}, eval_dataset_kwargs: {split_name: test}}
    """
    assert problems(tmp_path, text) == [
        "environments.0.dataset_kwargs.split_name: platoon-number-search has no split 'heldout'; its splits are "
        "train, val",
        "environments.1.eval_dataset_kwargs.split_name: platoon-number-search has no split 'test'; its splits are "
        "train, val",
    ]
def test_min_successful_group_size_is_at_most_the_smallest_group(tmp_path: Path) -> None:
    text = """
        train: {workflow_config: {min_successful_group_size: 3}}
        environments: [{name: a, workflow_config: {group_size: 4}}, {name: b, workflow_config: {group_size: 2}}]
    """
    assert problems(tmp_path, text) == [
        "train.workflow_config.min_successful_group_size: 3 is more than the group size of environments.1, 2; it "
        "must lie in [1, group_size]"
    ]
    assert loads(tmp_path, text.replace("3}", "2}")).train.workflow_config.min_successful_group_size == 2


def test_loss_fn_config_takes_the_chosen_losss_keys_each_problem_at_its_key(tmp_path: Path) -> None:
    text = """
        train:
          loss_fn: ppo
          loss_fn_config: {clip_low_threshold: 0.8, clip_ratio: 0.2, epsilon: 0.1, entropy_coef: -1.0}
    """
    takes = "ppo takes clip_low_threshold, clip_high_threshold, kl_coef, entropy_coef"
    assert problems(tmp_path, text) == [
        f"train.loss_fn_config.clip_ratio: unknown key; {takes}",
        f"train.loss_fn_config.epsilon: unknown key; {takes}",
        "train.loss_fn_config.entropy_coef: must be at least 0, got -1.0",
    ]
    assert problems(tmp_path, "train: {loss_fn: cispo, loss_fn_config: {clip_low_threshold: 6.0}}") == [
        "train.loss_fn_config: clip_low_threshold (6) must not exceed clip_high_threshold (5): both bound the "
        "probability ratio itself"
    ]
    # 0.4.0's default mapping goes with every loss (importance_sampling ignores its thresholds), and a config's own
    # mapping replaces it whole.
    assert loads(tmp_path, "train: {loss_fn: importance_sampling}").train.loss_fn_config == {
        "clip_low_threshold": 0.0, "clip_high_threshold": 5.0}
    assert loads(tmp_path, "train: {loss_fn_config: {clip_high_threshold: 1.28}}").train.loss_fn_config == {
        "clip_high_threshold": 1.28}


def test_group_limits_name_any_label_under_label_by(tmp_path: Path) -> None:
    assert loads(tmp_path, "train: {label_by: difficulty, rollout_group_limits: {hard: 2}}").train.label_by


def test_the_built_in_models_shape_is_checked_only_for_tiny(tmp_path: Path) -> None:
    assert problems(tmp_path, "model: {d_model: 30, n_heads: 4}") == ["model.d_model: 30 is not a multiple of n_heads (4)"]
    (tmp_path / "ckpt").mkdir()
    cfg = loads(tmp_path, f"train: {{model_name: {tmp_path / 'ckpt'}}}\nmodel: {{d_model: 30, n_heads: 4}}")
    assert cfg.model.d_model == 30


# --- one mistake, one line -------------------------------------------------------------------------------------


def test_a_bad_value_is_not_reported_again_by_a_rule(tmp_path: Path) -> None:
    # group_size 0 fails its own check; the permits rule must not complain about the default that stands in.
    text = """
        train: {max_concurrent_rollouts: 4, workflow_config: {group_size: 2}}
        environments: [{name: a, workflow_config: {group_size: 0}}, {name: b}]
    """
    assert problems(tmp_path, text) == ["environments.0.workflow_config.group_size: must be at least 1, got 0"]
    # so is the quorum rule beside a timeout that failed its own check
    text = "train: {workflow_config: {straggler_timeout_seconds: -1, straggler_quorum: 2}}"
    assert problems(tmp_path, text) == ["train.workflow_config.straggler_timeout_seconds: must be above 0.0, got -1"]


def test_rules_still_run_beside_unrelated_type_errors(tmp_path: Path) -> None:
    text = """
        train: {max_training_steps: x, num_minibatches: 2, group_admission: informative}
        environments: [{name: a}, {name: a, seed: y}, just-a-string]
    """
    assert problems(tmp_path, text) == [
        "train.max_training_steps: must be an integer, got 'x'",
        "environments.1.seed: must be an integer, got 'y'",
        "environments.2: must be a mapping, got 'just-a-string'",
        "train.num_minibatches: takes 2 optimizer steps a batch, and a group admission rule (informative) makes "
        "short steps, whose minibatches would be few and uneven; set num_minibatches: 1",
        "environments.1.name: 'a' is already the name of environments.0",
    ]


def test_configs_built_in_code_are_checked_too() -> None:
    cfg = RunConfig(
        train=train(task_sampler="uniform", num_minibatches=2, group_admission="informative"),
        environments=[EnvironmentConfig(name="a", weight="tasks"), EnvironmentConfig(name="a")],
    )
    lines = [str(p) for p in config_problems(cfg)]
    assert [line.split(":")[0] for line in lines] == [
        "environments.0.weight",
        "train.num_minibatches",
        "environments.1.name",
    ]
    with pytest.raises(ConfigError) as info:
        check_config(cfg, source="built")
    assert str(info.value).startswith("invalid config built:\n  environments.0.weight: ")
    check_config(default_config())


def test_keys_of_absent_components_load_with_one_warning_naming_each(tmp_path: Path) -> None:
    from platoon.config.config_warnings import config_warnings

    assert config_warnings(load_config(None, [])) == []
    text = """
        tinker_base_url: http://localhost:8000
        train:
          lora_rank: 8
          workflow_config: {worker_finalize_grace_seconds: 4, worker_binding_poll_seconds: 2, rollout_config: {timeout: 3}}
        stats: {wandb: {project: p}}
        watchdog: {enabled: false}
        checkpoint: {load_checkpoint_path: 'tinker://x'}
        environments: [{env: platoon-number-search, harness: h, workflow_config: {filter_errors: false}}]
    """
    cfg = loads(tmp_path, text)
    (warning,) = config_warnings(cfg)
    keys = warning.split(": no effect here")[0].split(", ")
    assert sorted(keys) == sorted([
        "tinker_base_url", "train.lora_rank", "train.workflow_config.worker_finalize_grace_seconds",
        "train.workflow_config.worker_binding_poll_seconds", "train.workflow_config.rollout_config.timeout",
        "watchdog", "checkpoint.load_checkpoint_path", "environments.0.harness",
        "environments.0.workflow_config.filter_errors",
    ])
    # a key set to its default value is still named: the config set it, and nothing here acts on it
    (again,) = config_warnings(load_config(None, ["train.lora_rank=32"]))
    assert again.startswith("train.lora_rank: no effect here")


def test_a_no_effect_key_keeps_its_0_4_type(tmp_path: Path) -> None:
    assert problems(tmp_path, "train: {lora_rank: many}\nwatchdog: {max_restarts: -1}") == [
        "train.lora_rank: must be an integer, got 'many'",
        "watchdog.max_restarts: must be at least 0, got -1",
    ]


def test_the_no_effect_warning_reaches_each_start_of_a_run() -> None:
    from platoon.components import build_policy
    from platoon.config.config_warnings import config_warnings
    from platoon.policy.pool import EntrySpec, TaskPool

    cfg = load_config(None, ["train.workflow_config.worker_binding_poll_seconds=2"])
    (warning,) = config_warnings(cfg)
    assert warning.startswith("train.workflow_config.worker_binding_poll_seconds: no effect here")
    pool = TaskPool.from_entries([EntrySpec("default", ["a", "b"], group_size=8)])
    driver = build_policy(cfg, pool).driver
    driver.start(now=0.0)  # the launch save, then the start itself
    driver.poll(now=0.0)
    assert warning in driver.take_outbox().warnings


@pytest.mark.parametrize(("overrides", "why"), [
    ([], "rollouts run in the trainer's process (rollout_isolation: inprocess)"),
    (["train.workflow_config.rollout_isolation=process", "train.workflow_config.worker_start_method=exec"],
     "workers start fresh (worker_start_method: exec)"),
    (["train.workflow_config.rollout_isolation=process", "train.workflow_config.worker_python_env_isolation=true"],
     "each worker has its own Python environment (worker_python_env_isolation)"),
])
def test_a_worker_preload_where_nothing_is_imported_ahead_is_warned_about(overrides, why) -> None:
    from platoon.config.config_warnings import config_warnings

    cfg = load_config(None, ["train.workflow_config.worker_preload=[json.decoder]", *overrides])
    assert (f"train.workflow_config.worker_preload: nothing is imported ahead where {why}, so json.decoder is not "
            "preloaded") in config_warnings(cfg)


def test_the_acting_worker_keys_load_without_a_warning() -> None:
    from platoon.config.config_warnings import config_warnings

    cfg = load_config(None, ["train.workflow_config.rollout_isolation=process",
                             "train.workflow_config.worker_start_method=forkserver",
                             "train.workflow_config.worker_preload=[json.decoder]",
                             "train.workflow_config.worker_termination_grace_seconds=2"])
    assert config_warnings(cfg) == []
