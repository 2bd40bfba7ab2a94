"""The schema itself: defaults, strict types, ranges, descriptions, frozen models."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import BaseModel

from platoon.config.losses import loss_fn_config_problems, loss_settings, zero_at_zero_advantages
from platoon.config.models import (
    EnvironmentConfig,
    RunConfig,
    TrainConfig,
    WorkflowConfig,
    describe_errors,
)


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


def test_defaults_are_the_documented_ones() -> None:
    cfg = RunConfig()
    t = cfg.train
    assert (t.steps, t.batch_size, t.max_concurrent_rollouts, t.permit_release) == (100, 32, None, "rollout")
    assert (t.max_staleness, t.max_starting_rollouts, t.task_sampler, t.group_admission) == (
        1,
        None,
        "auto",
        "all",
    )
    assert (t.refill.max_groups_per_step, t.num_minibatches, t.seed) == (3.0, 1, 0)
    assert (t.checkpoint_every, t.eval_every, t.label_by, t.rollout_group_limits) == (10, 10, None, {})
    assert t.loss_fn == "cispo" and t.loss_fn_config == {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0}
    o = t.optimizer
    assert (o.learning_rate, o.beta1, o.beta2, o.eps, o.weight_decay, o.grad_clip_norm) == (
        3e-5, 0.9, 0.95, 1e-8, 0.0, 0.0)
    w = t.workflow_config
    assert (w.leave_one_out_baseline, w.filter_zero_advantage_datums, w.min_successful_group_size) == (
        False, True, 1)
    assert t.workflow_config.worker_start_method == "forkserver"
    assert t.workflow_config.rollout_isolation == "inprocess"
    assert t.workflow_config.worker_startup_budget_seconds == 300.0
    assert (t.straggler.timeout_s, t.straggler.quorum) == (None, None)
    [e] = cfg.environments
    assert (e.name, e.env, e.group_size, e.weight, e.split, e.eval_split) == (
        "number-search",
        "number_search",
        8,
        1.0,
        "train",
        "heldout",
    )
    assert (cfg.model.kind, cfg.model.device, cfg.model.max_batch, cfg.model.max_new_tokens) == (
        "tiny",
        "auto",
        256,
        8,
    )


def test_every_field_of_every_model_has_a_description() -> None:
    models = _models(RunConfig)
    assert {"TrainConfig", "RefillConfig", "OptimizerConfig", "StragglerConfig", "SimConfig"} <= {
        m.__name__ for m in models
    }
    missing = [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not f.description]
    assert missing == []


def test_every_model_is_frozen_and_forbids_unknown_keys() -> None:
    for m in _models(RunConfig):
        assert m.model_config.get("frozen") is True, m
        assert m.model_config.get("extra") == "forbid", m
    cfg = RunConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.train.steps = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"steps": "10"}, "train.steps: must be an integer, got '10'"),
        ({"steps": 1.5}, "train.steps: must be an integer, got 1.5"),
        ({"steps": True}, "train.steps: must be an integer, got true"),
        ({"steps": 0}, "train.steps: must be at least 1, got 0"),
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
        ({"straggler": {"timeout_s": 0}}, "train.straggler.timeout_s: must be above 0"),
        ({"rollout_group_limits": {"a": 0}}, "train.rollout_group_limits.a: must be at least 1, got 0"),
    ],
)
def test_train_field_checks(data: dict, expected: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        RunConfig.model_validate({"train": data})
    [line] = [str(p) for p in describe_errors(info.value, root=RunConfig, data={"train": data})]
    assert line.startswith(expected), line


def test_refill_cap_message_names_the_value() -> None:
    data = {"train": {"refill": {"max_groups_per_step": 0.5}}}
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


def test_entry_name_is_required_and_not_empty() -> None:
    with pytest.raises(pydantic.ValidationError, match="name"):
        EnvironmentConfig.model_validate({})
    with pytest.raises(pydantic.ValidationError):
        EnvironmentConfig.model_validate({"name": ""})


def test_no_environments_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="at least one environment entry"):
        RunConfig.model_validate({"environments": []})


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
