"""What a live run trains and evaluates on: an entry's dataset_kwargs, eval_dataset_kwargs and exclude_tasks shape
its pool and its evaluation tasks (platoon.live.launch.build)."""

from __future__ import annotations

import pytest
from config_kit import schema_config

from platoon.config.errors import ConfigError
from platoon.live.agent.harness import default_renderer
from platoon.live.envs import NumberSearch
from platoon.live.launch.build import build_environments, build_pool, entry_tasks, evaluate_policy

SMALL = {"ranges": [4, 8]}


def config(*overrides):
    return schema_config(["environments.0.service_kwargs={ranges: [4, 8]}", *overrides])


def pool_ids(cfg):
    return [r.task_id for r in build_pool(cfg, build_environments(cfg)).rows]


def test_limit_and_shuffle_seed_pick_the_training_tasks_and_exclude_tasks_leaves_some_out():
    train = NumberSearch(**SMALL).task_ids("train")
    assert pool_ids(config()) == train  # no dataset_kwargs: the train split in its order
    assert pool_ids(config("environments.0.dataset_kwargs={limit: 5}")) == train[:5]
    shuffled = pool_ids(config("environments.0.dataset_kwargs={shuffle_seed: 3, limit: 10}"))
    assert len(shuffled) == 10 and set(shuffled) <= set(train) and shuffled != train[:10]
    assert pool_ids(config("environments.0.dataset_kwargs={shuffle_seed: 3, limit: 10}")) == shuffled
    assert pool_ids(config("environments.0.dataset_kwargs={shuffle_seed: 4, limit: 10}")) != shuffled
    gone = shuffled[:2]
    left = pool_ids(config("environments.0.dataset_kwargs={shuffle_seed: 3, limit: 10}",
                           f"environments.0.exclude_tasks=[{gone[0]}, {gone[1]}]"))
    assert len(left) == 10 and not set(gone) & set(left)  # left out before the limit: still 10 tasks
    assert pool_ids(config(f"environments.0.exclude_tasks=[{train[0]}]")) == train[1:]


def test_a_mixtures_pool_names_each_task_by_its_entry_and_its_keys_name_the_environments_ids():
    train = NumberSearch(**SMALL).task_ids("train")
    entry = "{env: platoon-number-search@1, service_kwargs: {ranges: [4, 8]}, dataset_kwargs: {limit: 3}"
    cfg = schema_config([f"environments=[{entry}, name: easy}}, {entry}, name: hard, "
                             f"exclude_tasks: [{train[0]}]}}]"])
    pool = build_pool(cfg, build_environments(cfg))
    # both entries list the same environment tasks: each entry's are its own tasks of the pool (platoon 0.4.0)
    assert pool.task_ids == (*(f"easy::{t}" for t in train[:3]), *(f"hard::{t}" for t in train[1:4]))
    assert [r.env_task_id for r in pool.rows] == [*train[:3], *train[1:4]]


def test_the_evaluation_tasks_are_the_eval_split_shaped_alike(monkeypatch):
    env = NumberSearch(**SMALL)
    val = env.task_ids("val")
    cfg = config(f"environments.0.exclude_tasks=[{val[0]}]", "environments.0.eval_dataset_kwargs={limit: 3}")
    (e,) = cfg.environments
    assert entry_tasks(e, env, training=False) == val[1:4]
    assert entry_tasks(e, env, training=True) == env.task_ids("train")  # the limit is the evaluation's alone
    train_eval = config("environments.0.eval_dataset_kwargs={split_name: train, limit: 2}")
    assert entry_tasks(train_eval.environments[0], env, training=False) == env.task_ids("train")[:2]

    import platoon.live.rollouts.evaluate as evaluate_module

    asked = []
    real = evaluate_module.evaluate

    def recording(model, env, tasks, n, **kwargs):
        asked.append(list(tasks))
        return real(model, env, tasks, n, **kwargs)

    monkeypatch.setattr(evaluate_module, "evaluate", recording)

    from platoon.live.inference.model import TinyConfig, TinyPolicy

    policy = TinyPolicy(TinyConfig(vocab_size=default_renderer([env]).tokenizer.vocab_size, max_len=128, d_model=16,
                                   n_heads=2, n_layers=1), device="cpu")
    row = evaluate_policy(policy, cfg, build_environments(cfg), n=12)
    assert asked == [val[1:4]] and row["eval/episodes"] == 12.0


def test_an_entry_left_without_tasks_is_a_config_problem():
    train = NumberSearch(**SMALL).task_ids("train")
    cfg = config("environments.0.dataset_kwargs={limit: 2}", f"environments.0.tasks=[{train[0]}]",
                 f"environments.0.exclude_tasks=[{train[0]}]")
    with pytest.raises(ConfigError, match=r"environments\.0\.dataset_kwargs: no training task is left"):
        build_pool(cfg, build_environments(cfg))


@pytest.mark.parametrize("overrides, evaluated", [
    ([], []),  # the config default: no evaluation at all
    (["eval.at_start=true"], [0]),  # at the start only: not every step, not the final policy
    (["eval.every=2"], [2, 4, 5]),  # every 2 steps and the final policy; step 0 only under at_start
    (["eval.every=2", "eval.at_start=true"], [0, 2, 4, 5]),
])
def test_eval_at_start_evaluates_step_0_and_every_the_steps_after(overrides, evaluated):
    from platoon.live.launch.build import build_live

    cfg = config("train.max_training_steps=5", "model.d_model=16", "model.n_layers=1", *overrides)
    driver = build_live(cfg).policy.driver
    assert [s for s in range(driver.steps + 1) if driver.eval_due(s)] == evaluated


def test_the_renderer_and_the_harness_budgets_come_from_the_config():
    from platoon.live.agent.harness import Limits
    from platoon.live.agent.role_colon import RoleColonRenderer
    from platoon.live.launch.build import build_live

    cfg = config("train.workflow_config.rollout_config.max_steps=2", "train.context_window_length=96",
                 "train.workflow_config.rollout_config.inference_params.max_completion_tokens=3",
                 "model.d_model=16", "model.n_heads=2", "model.n_layers=1")
    live = build_live(cfg)
    assert isinstance(live.renderer, RoleColonRenderer) and live.workflow.renderer is live.renderer
    assert live.workflow.limits == Limits(max_new_tokens=3, max_turns=2, context_window=96, step_timeout=300)
    assert live.model.max_len == 96 and live.model.vocab_size == live.renderer.tokenizer.vocab_size


@pytest.mark.parametrize("override, problem", [
    ("train.renderer_name=nope", "train.renderer_name: 'nope' is not a renderer here"),
    ("train.renderer_kwargs={tool_call_parser: hermes}", "train.renderer_kwargs: role_colon takes no options"),
])
def test_a_renderer_the_config_cannot_have_is_refused_when_it_loads(override, problem):
    with pytest.raises(ConfigError) as info:
        config(override)
    assert any(problem in p for p in info.value.problems)
