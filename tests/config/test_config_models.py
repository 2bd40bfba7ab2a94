"""The schema itself: defaults, strict types, ranges, descriptions, frozen models."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import BaseModel

from platoon.config.losses import loss_fn_config_problems, loss_settings, zero_at_zero_advantages
from platoon.config.models import (
    EMBEDDED_DEFAULT,
    EnvironmentConfig,
    RunConfig,
    TrainConfig,
    WorkflowConfig,
    default_config,
    schema_defaults,
)
from platoon.config.problems import describe_errors
from platoon.config.sections import DatasetKwargs


def _models(root: type[BaseModel]) -> set[type[BaseModel]]:
    """Every model class reachable from ``root``'s fields (through lists, unions, Annotated)."""
    seen: set[type[BaseModel]] = set()
    todo: list[object] = [root]
    while todo:
        t = todo.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            if t in seen:
                continue
            seen.add(t)
            todo += [f.annotation for f in t.model_fields.values()]
        else:
            todo += list(getattr(t, "__args__", ()) or ())
            origin = getattr(t, "__origin__", None)
            if origin is not None and hasattr(t, "__metadata__"):
                todo.append(origin)
    return seen


def test_the_embedded_default_is_the_cpu_demo() -> None:
    t = (cfg := default_config()).train
    assert (t.max_training_steps, t.batch_size, t.max_staleness, t.loss_fn, t.optimizer.learning_rate) == (
        300, 32, 1, "ppo", 0.003)
    assert t.loss_fn_config == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28, "entropy_coef": 0.003}
    assert (cfg.eval.every, cfg.eval.at_start, cfg.checkpoint.recovery_every, cfg.checkpoint.keep_recovery) == (
        50, True, 50, 3)
    assert [e.service_kwargs for e in cfg.environments] == [{"show_range": True}]


def test_defaults_are_the_documented_ones() -> None:
    cfg = schema_defaults()  # what a config file starts from: 0.4.0's defaults
    t = cfg.train
    assert (t.model_name, t.renderer_name, t.max_training_steps, t.num_epochs) == ("tiny", "role_colon", None, None)
    assert (t.batch_size, t.max_concurrent_rollouts, t.permit_release) == (32, None, "rollout")
    assert (t.max_staleness, t.max_starting_rollouts, t.task_sampler, t.group_admission) == (
        None,
        None,
        "auto",
        "all",
    )
    assert (t.refill.max_groups_per_step, t.num_minibatches, t.seed) == (3.0, 1, 0)
    assert (t.label_by, t.rollout_group_limits) == (None, {})
    assert t.loss_fn == "cispo" and t.loss_fn_config == {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0}
    o = t.optimizer
    assert (o.learning_rate, o.beta1, o.beta2, o.eps, o.weight_decay, o.grad_clip_norm) == (
        3e-5, 0.9, 0.95, 1e-8, 0.0, 0.0)
    w = t.workflow_config
    assert (w.group_size, w.min_successful_group_size, w.leave_one_out_baseline, w.filter_zero_advantage_datums) == (
        8, 1, False, True
    )
    assert (w.straggler_timeout_seconds, w.straggler_quorum, w.straggler_policies) == (None, None, {})
    assert w.worker_start_method == "forkserver" and w.rollout_isolation == "inprocess"
    assert w.worker_startup_budget_seconds == 300.0
    params = w.rollout_config.inference_params
    assert (params.temperature, params.max_completion_tokens) == (None, None)
    assert (cfg.log_path, cfg.stats.experiment_name, cfg.stats.trial_name) == (None, "platoon_tinker", "run")
    c = cfg.checkpoint
    assert (c.every, c.strategy, c.recovery_every, c.keep_recovery) == (None, None, None, None)
    assert (cfg.eval.every, cfg.eval.strategy, cfg.eval.at_start) == (None, None, False)
    [e] = cfg.environments
    assert (e.name, e.label, e.env, e.weight, e.workflow_config.group_size) == (
        None, "default", "platoon-number-search", "tasks", None
    )
    assert (e.dataset_kwargs.split_name, e.eval_dataset_kwargs.split_name, e.exclude_tasks) == (None, None, [])
    assert (cfg.model.device, cfg.model.max_batch, cfg.model.d_model) == ("auto", 256, 64)


def test_a_config_needs_its_train_section_model_and_renderer() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        RunConfig.model_validate({})
    assert [str(p) for p in describe_errors(info.value, root=RunConfig, data={})] == [
        "train: missing required key"
    ]
    data: dict = {"train": {}}
    with pytest.raises(pydantic.ValidationError) as info:
        RunConfig.model_validate(data)
    assert [str(p) for p in describe_errors(info.value, root=RunConfig, data=data)] == [
        "train.model_name: missing required key",
        "train.renderer_name: missing required key",
    ]
    assert default_config() == RunConfig.model_validate(EMBEDDED_DEFAULT)


def test_every_field_of_every_model_has_a_description() -> None:
    models = _models(RunConfig)
    assert {"TrainConfig", "RefillConfig", "OptimizerConfig", "WorkflowConfig", "StragglerPolicy", "CheckpointConfig",
            "EvalConfig", "DatasetKwargs", "SimConfig"} <= {
        m.__name__ for m in models
    }
    missing = [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not f.description]
    assert missing == []


def test_every_model_is_frozen_and_forbids_unknown_keys() -> None:
    # dataset_kwargs' unknown keys are refused by stage 2, as 0.4.0 refuses them (test_config_resolve.py)
    for m in _models(RunConfig):
        assert m.model_config.get("frozen") is True, m
        assert m.model_config.get("extra") == ("allow" if m is DatasetKwargs else "forbid"), m
    cfg = default_config()
    with pytest.raises(pydantic.ValidationError):
        cfg.train.max_training_steps = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"max_training_steps": "10"}, "train.max_training_steps: must be an integer, got '10'"),
        ({"max_training_steps": 1.5}, "train.max_training_steps: must be an integer, got 1.5"),
        ({"num_epochs": True}, "train.num_epochs: must be an integer, got true"),
        ({"max_training_steps": 0}, "train.max_training_steps: must be at least 1, got 0"),
        ({"max_staleness": -1}, "train.max_staleness: must be at least 0, got -1"),
        ({"permit_release": "both"}, "train.permit_release: must be 'rollout' or 'group', got 'both'"),
        (
            {"refill": {"max_groups_per_step": 0.5}},
            "train.refill.max_groups_per_step: must be a finite number of at least 1",
        ),
        (
            {"refill": {"max_groups_per_step": None}},
            "train.refill.max_groups_per_step: must be a finite number of at least 1",
        ),
        (
            {"refill": {"max_groups_per_step": True}},
            "train.refill.max_groups_per_step: must be a finite number of at least 1",
        ),
        (
            {"refill": {"max_groups_per_step": float("inf")}},
            "train.refill.max_groups_per_step: must be a finite",
        ),
        (
            {"loss_fn": "grpo"},
            "train.loss_fn: must be one of cispo, importance_sampling, ppo, got 'grpo'",
        ),
        (
            {"loss_fn": "stable_reinforce"},
            "train.loss_fn: 'stable_reinforce' is a Tinker loss this trainer does not implement; one of cispo, "
            "importance_sampling, ppo",
        ),
        (
            {"loss": {"objective": "ppo"}},
            "train.loss: unknown key; use train.loss_fn (ppo, importance_sampling, cispo) and train.loss_fn_config",
        ),
        (
            {"loss_fn_config": {"clip_low_threshold": "low"}},
            "train.loss_fn_config.clip_low_threshold: must be a number, got 'low'",
        ),
        (
            {"optimizer": {"beta2": 1.0}},
            "train.optimizer.beta2: must be below 1.0, got 1.0",
        ),
        (
            {"optimizer": {"lr": 0.1}},
            "train.optimizer.lr: unknown key; did you mean",
        ),
        (
            {"workflow_config": {"min_successful_group_size": 0}},
            "train.workflow_config.min_successful_group_size: must be at least 1, got 0",
        ),
        (
            {"workflow_config": {"worker_preload": ["ok.mod", "not a module"]}},
            "train.workflow_config.worker_preload: must be dotted module names",
        ),
        (
            {"workflow_config": {"straggler_timeout_seconds": 0}},
            "train.workflow_config.straggler_timeout_seconds: must be above 0",
        ),
        (
            {"workflow_config": {"straggler_policies": {"a": {"quorum": 0}}}},
            "train.workflow_config.straggler_policies.a.quorum: must be at least 1, got 0",
        ),
        (
            {"workflow_config": {"worker_start_method": "spawn"}},
            "train.workflow_config.worker_start_method: must be 'forkserver' or 'exec', got 'spawn'",
        ),
        ({"rollout_group_limits": {"a": 0}}, "train.rollout_group_limits.a: must be at least 1, got 0"),
    ],
)
def test_train_field_checks(data: dict, expected: str) -> None:
    full = {"train": {**EMBEDDED_DEFAULT["train"], **data}}
    with pytest.raises(pydantic.ValidationError) as info:
        RunConfig.model_validate(full)
    [line] = [str(p) for p in describe_errors(info.value, root=RunConfig, data=full)]
    assert line.startswith(expected), line


def test_refill_cap_message_names_the_value() -> None:
    data = {"train": {**EMBEDDED_DEFAULT["train"], "refill": {"max_groups_per_step": 0.5}}}
    with pytest.raises(pydantic.ValidationError) as info:
        RunConfig.model_validate(data)
    [p] = describe_errors(info.value, root=RunConfig, data=data)
    assert p.message.endswith("got 0.5")


@pytest.mark.parametrize("weight", [0, -1.0, True, "all", float("nan"), None])
def test_weight_is_positive_or_tasks(weight: object) -> None:
    with pytest.raises(pydantic.ValidationError, match="must be a positive number or 'tasks'"):
        EnvironmentConfig.model_validate({"name": "a", "weight": weight})
    assert EnvironmentConfig(name="a", weight="tasks").weight == "tasks"
    assert EnvironmentConfig(name="a", weight=2).weight == 2.0


def test_task_ids_read_as_text() -> None:
    e = EnvironmentConfig.model_validate({"name": "a", "tasks": [17, "b"]})
    assert e.tasks == ["17", "b"]


def test_entry_name_is_optional_and_not_empty() -> None:
    assert EnvironmentConfig.model_validate({}).label == "default"
    assert EnvironmentConfig.model_validate({"name": "a/b"}).label == "a/b"
    for bad in ("", "a::b", "a\tb"):
        with pytest.raises(pydantic.ValidationError):
            EnvironmentConfig.model_validate({"name": bad})


def test_no_environments_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="at least one environment entry"):
        RunConfig.model_validate({**EMBEDDED_DEFAULT, "environments": []})


@pytest.mark.parametrize(
    ("kl", "entropy", "zero"), [(0.0, 0.0, True), (0.1, 0.0, False), (0.0, 0.01, False), (0.1, 0.01, False)]
)
def test_zero_at_zero_advantages_only_without_kl_and_entropy(kl: float, entropy: float, zero: bool) -> None:
    assert zero_at_zero_advantages({"clip_low_threshold": 0.0, "kl_coef": kl, "entropy_coef": entropy}) is zero
    assert zero_at_zero_advantages({}) is True


@pytest.mark.parametrize("loss_fn", ["ppo", "importance_sampling", "cispo"])
def test_every_loss_takes_the_clip_thresholds_and_the_two_platoon_only_keys(loss_fn: str) -> None:
    full = {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0, "kl_coef": 0.1, "entropy_coef": 0.01}
    assert loss_fn_config_problems(loss_fn, full) == []
    assert loss_fn_config_problems(loss_fn, {"clip_ratio": 0.2}) == [
        ("clip_ratio", f"unknown key; {loss_fn} takes clip_low_threshold, clip_high_threshold, kl_coef, "
                       "entropy_coef")]
    assert loss_fn_config_problems(loss_fn, {"kl_coef": -1.0}) == [("kl_coef", "must be at least 0, got -1.0")]
    [(key, message)] = loss_fn_config_problems(loss_fn, {"clip_low_threshold": 3.0, "clip_high_threshold": 2.0})
    assert key == "" and message.startswith("clip_low_threshold (3) must not exceed clip_high_threshold (2)")


def test_a_threshold_left_out_is_the_losss_own_default() -> None:
    assert loss_settings("ppo", {}) == ("ppo", 0.8, 1.2, 0.0, 0.0)
    assert loss_settings("cispo", {"entropy_coef": 0.01}) == ("cispo", 0.0, 5.0, 0.0, 0.01)
    assert loss_settings("ppo", {"clip_high_threshold": 1.28}).clip_high == 1.28


def test_task_order_is_not_a_field_and_has_its_hint() -> None:
    assert "task_order" not in TrainConfig.model_fields
    assert TrainConfig.UNKNOWN_KEY_HINTS["task_order"] == (
        "unknown key; platoon 0.4.0 removed it; use train.task_sampler"
    )


def test_worker_preload_takes_dotted_names() -> None:
    assert WorkflowConfig(worker_preload=["a", "a.b_c.d2"]).worker_preload == ["a", "a.b_c.d2"]
    for bad in ["a..b", "1a", "a-b", ""]:
        with pytest.raises(pydantic.ValidationError):
            WorkflowConfig(worker_preload=[bad])
