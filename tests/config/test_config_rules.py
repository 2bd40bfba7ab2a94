"""Stage 1's rules between fields: names, core options, samplers and weights, rule mode, permits, labels."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

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

NOT_ONE_OF_SAMPLERS = (
    "is not one of 'auto', 'weighted', 'uniform', 'pass_rate', a name an environment's package registers, or "
    "module:Class"
)


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


def loads(tmp_path: Path, text: str) -> RunConfig:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text))
    return load_config(path)


# --- names -----------------------------------------------------------------------------------------------------


def test_unresolvable_names_are_refused_at_load(tmp_path: Path) -> None:
    text = """
        train: {task_sampler: pass-rate, group_admission: informatve}
        environments:
          - {name: a, task_sampler: thompson, group_admission: strict, env: textcraft}
    """
    assert problems(tmp_path, text) == [
        f"train.task_sampler: 'pass-rate' {NOT_ONE_OF_SAMPLERS}; did you mean 'pass_rate'?",
        "train.group_admission: 'informatve' is not one of 'all', 'informative', a name an environment's package "
        "registers, or module:Class; did you mean 'informative'?",
        "environments.0.task_sampler: 'thompson' is not one of 'uniform', 'pass_rate', a name an environment's "
        "package registers, or module:Class",
        "environments.0.group_admission: 'strict' is not one of 'all', 'informative', a name an environment's "
        "package registers, or module:Class",
        "environments.0.env: 'textcraft' is not one of 'number_search', a name an environment's package registers, "
        "or module:Class",
    ]


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
          - {{name: a, weight: 2}}
          - {{name: b, weight: tasks, task_sampler: uniform}}
          - {{name: c, weight: 1.0, task_sampler_options: {{x: 1}}}}
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
        tmp_path, "train: {task_sampler: pass_rate}\nenvironments: [{name: a, group_size: 1}, {name: b}]"
    )
    assert run == [
        "environments.0.group_size: pass_rate chooses tasks likely to mix passes and failures, which a group of one "
        "never does (train.task_sampler: pass_rate); use uniform, or a group size of 2 or more"
    ]
    entry = problems(
        tmp_path,
        "environments: [{name: a, group_size: 1, task_sampler: pass_rate}, {name: b, group_size: 1}]",
    )
    assert entry == [
        "environments.0.group_size: pass_rate chooses tasks likely to mix passes and failures, which a group of one "
        "never does (environments.0.task_sampler: pass_rate); use uniform, or a group size of 2 or more"
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
          straggler: {quorum: 5}
          rollout_group_limits: {a/x: 2, nope: 1}
        environments: [{name: a/x, group_size: 4}, {name: b, group_size: 8}, {name: a/x, group_size: 2}]
        model: {d_model: 30, n_heads: 4}
    """
    assert problems(tmp_path, text) == [
        "environments.2.name: 'a/x' is already the name of environments.0",
        "train.max_concurrent_rollouts: 6 permits cannot hold one group of environments.1 (group_size 8); set at "
        "least 8",
        "train.straggler.quorum: 5 is more than the smallest group size, 2",
        "train.rollout_group_limits.nope: no environment entry is named 'nope' (while label_by is null, labels are "
        "entry names)",
        "model.d_model: 30 is not a multiple of n_heads (4)",
    ]


def test_min_successful_group_size_is_at_most_the_smallest_group(tmp_path: Path) -> None:
    text = """
        train: {workflow_config: {min_successful_group_size: 3}}
        environments: [{name: a, group_size: 4}, {name: b, group_size: 2}]
    """
    assert problems(tmp_path, text) == [
        "train.workflow_config.min_successful_group_size: must be in [1, group_size]: 3 is more than the smallest "
        "group size, 2"
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


def test_hf_needs_a_path(tmp_path: Path) -> None:
    assert problems(tmp_path, "model: {kind: hf}") == [
        "model.path: kind hf needs path: a local directory holding the checkpoint"
    ]


# --- one mistake, one line -------------------------------------------------------------------------------------


def test_a_bad_value_is_not_reported_again_by_a_rule(tmp_path: Path) -> None:
    # group_size 0 fails its own check; the permits rule must not complain about the default that stands in.
    text = "train: {max_concurrent_rollouts: 4}\nenvironments: [{name: a, group_size: 0}, {name: b, group_size: 2}]"
    assert problems(tmp_path, text) == ["environments.0.group_size: must be at least 1, got 0"]


def test_rules_still_run_beside_unrelated_type_errors(tmp_path: Path) -> None:
    text = """
        train: {steps: x, num_minibatches: 2, group_admission: informative}
        environments: [{name: a}, {name: a, seed: y}, just-a-string]
    """
    assert problems(tmp_path, text) == [
        "train.steps: must be an integer, got 'x'",
        "environments.1.seed: must be an integer, got 'y'",
        "environments.2: must be a mapping, got 'just-a-string'",
        "train.num_minibatches: takes 2 optimizer steps a batch, and a group admission rule (informative) makes "
        "short steps, whose minibatches would be few and uneven; set num_minibatches: 1",
        "environments.1.name: 'a' is already the name of environments.0",
    ]


def test_configs_built_in_code_are_checked_too() -> None:
    cfg = RunConfig(
        train=TrainConfig(task_sampler="uniform", num_minibatches=2, group_admission="informative"),
        environments=[EnvironmentConfig(name="a", weight=3.0), EnvironmentConfig(name="a")],
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
    check_config(RunConfig())


def test_worker_keys_that_nothing_acts_on_yet_are_warned_about_at_validate_and_at_each_start():
    from platoon.config import load_config
    from platoon.config.resolve import config_warnings
    from platoon.policy.assemble import build_policy
    from platoon.policy.pool import EntrySpec, TaskPool

    assert config_warnings(load_config(None, [])) == []
    cfg = load_config(None, ["train.workflow_config.rollout_isolation=process",
                             "train.workflow_config.worker_start_method=spawn"])
    (warning,) = config_warnings(cfg)
    assert "rollout_isolation: 'process'" in warning and "worker_start_method: 'spawn'" in warning
    assert "has no effect in this release" in warning
    pool = TaskPool.from_entries([EntrySpec("number-search", ["a", "b"], group_size=cfg.environments[0].group_size)])
    driver = build_policy(cfg, pool).driver
    driver.start(now=0.0)
    assert warning in driver.take_outbox().warnings
