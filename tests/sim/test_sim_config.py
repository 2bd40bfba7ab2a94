"""The sim section of a config: presets, sim.preset, entries' overrides, and problems reported as one ConfigError."""

from __future__ import annotations

import pytest

from platoon.config.effective import group_size
from platoon.config.errors import ConfigError
from platoon.config.sim import EmpiricalDuration, LognormalDuration
from platoon.sim.setup import build_tasks, entry_sims, load_sim_config, preset_names

# what every config file must set: the model, and (for a run) a plan
MODEL = "model_name: tiny, renderer_name: role_colon"
TRAIN = f"train: {{{MODEL}, max_training_steps: 3}}\n"

def test_presets_ship_and_load():
    assert {"long-agentic", "textcraft-synth", "math"} <= set(preset_names())
    for name in preset_names():
        cfg = load_sim_config(None, preset=name)
        assert cfg.train.max_training_steps >= 1
        build_tasks(cfg)
    agentic = load_sim_config(None)  # no config, no preset: long-agentic
    assert agentic.train.max_concurrent_rollouts == 256
    assert group_size(agentic, 0) == 8
    assert isinstance(agentic.sim.rollout.duration, LognormalDuration)
    assert agentic.sim.rollout.duration.median_s >= 60


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'long-agentc'; did you mean 'long-agentic'"):
        load_sim_config(None, preset="long-agentc")


def test_sim_preset_is_the_base_of_a_configs_sim(tmp_path):
    (tmp_path / "run.yaml").write_text(
        f"train: {{{MODEL}, max_training_steps: 3, batch_size: 2}}\n"
        "sim:\n  preset: math\n  trainer: {step_s: 1.5}\n")
    cfg = load_sim_config(tmp_path / "run.yaml")
    assert cfg.train.batch_size == 2  # the config's run
    assert cfg.sim.trainer.step_s == 1.5  # its own key wins
    assert cfg.sim.trainer.publish_s == 3.0  # the rest is the preset's
    assert cfg.sim.rollout.model_calls == 1
    (tmp_path / "plain.yaml").write_text(TRAIN)
    beside = load_sim_config(tmp_path / "plain.yaml", preset="textcraft-synth")
    assert beside.sim.preset == "textcraft-synth" and beside.sim.rollout.model_calls == 12
    assert beside.train.max_training_steps == 3
    overridden = load_sim_config(tmp_path / "plain.yaml", preset="math", overrides=["sim.trainer.step_s=1"])
    assert (overridden.sim.trainer.step_s, overridden.sim.trainer.publish_s) == (1.0, 3.0)


def test_overrides_and_files_relative_to_the_config(tmp_path):
    (tmp_path / "d.txt").write_text("1\n2\n")
    (tmp_path / "run.yaml").write_text(
        TRAIN + "environments:\n"
        "  - {name: a, workflow_config: {group_size: 4}}\n"
        "  - {name: b, workflow_config: {group_size: 2}, sim: {rollout: {duration: {dist: empirical, file: d.txt}}}}\n")
    cfg = load_sim_config(tmp_path / "run.yaml", overrides=["environments.0.workflow_config.group_size=8",
                                                            "sim.rollout.error_rate=0.1"])
    a, b = entry_sims(cfg)
    assert group_size(cfg, 0) == 8
    assert isinstance(b.rollout.duration, EmpiricalDuration)
    assert b.rollout.duration.file == str(tmp_path / "d.txt")
    assert a.rollout.error_rate == b.rollout.error_rate == 0.1  # the run's, merged under b's own
    tasks = build_tasks(cfg)
    assert len(tasks.pool) == 2 * 256


def test_a_mixtures_tasks_are_named_by_their_entry_and_keep_their_difficulty(tmp_path):
    (tmp_path / "run.yaml").write_text(
        TRAIN + "environments:\n  - {name: a, tasks: [t1, t2]}\n  - {name: b, tasks: [t1], exclude_tasks: [t2]}\n")
    tasks = build_tasks(load_sim_config(tmp_path / "run.yaml"))
    # the config's tasks name the entries' own ids; the pool names each by its entry (two tasks t1, not one)
    assert tasks.pool.task_ids == ("a::t1", "a::t2", "b::t1")
    assert [r.env_task_id for r in tasks.pool.rows] == ["t1", "t2", "t1"]
    (tmp_path / "one.yaml").write_text(TRAIN + "environments:\n  - {name: a, tasks: [t1, t2]}\n")
    one = build_tasks(load_sim_config(tmp_path / "one.yaml"))
    assert one.pool.task_ids == ("t1", "t2")
    # a task's simulated difficulty comes from the entry's id, not the pool's: the same in a mixture or alone
    assert list(tasks.learner.difficulty[:2]) == list(one.learner.difficulty)


def test_every_problem_in_one_report(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        f"train: {{{MODEL}, max_training_steps: 0}}\n"
        "sim:\n  rollout: {duration: {dist: lognormal, median_s: -1}, error_rate: 2}\n"
        "  trainer: {step_sec: 3}\n")
    with pytest.raises(ConfigError) as info:
        load_sim_config(tmp_path / "bad.yaml")
    text = "\n".join(info.value.problems)
    for path in ("train.max_training_steps", "sim.rollout.duration.median_s", "sim.rollout.duration.sigma",
                 "sim.rollout.error_rate", "sim.trainer.step_sec"):
        assert path in text


def test_an_entry_may_not_set_the_runs_keys(tmp_path):
    (tmp_path / "run.yaml").write_text(
        TRAIN + "environments:\n  - {name: a, sim: {trainer: {step_s: 1}, gpus: 2}}\n")
    with pytest.raises(ConfigError) as info:
        build_tasks(load_sim_config(tmp_path / "run.yaml"))
    assert info.value.problems == [
        "environments.0.sim.trainer: the run's alone; set it in the run's sim block",
        "environments.0.sim.gpus: the run's alone; set it in the run's sim block",
    ]


def test_a_missing_task_file_is_a_config_problem(tmp_path):
    (tmp_path / "run.yaml").write_text(TRAIN + "sim: {tasks: nowhere.csv}\n")
    with pytest.raises(ConfigError, match="sim.tasks: .*nowhere.csv: cannot read"):
        build_tasks(load_sim_config(tmp_path / "run.yaml"))


def test_turns_an_int_or_a_list_and_one_problem_each(tmp_path):
    cfg = load_sim_config(None, overrides=["sim.rollout.turns={passing: [2, 3], failing: 9}",
                                           "sim.rollout.env_step_s={dist: fixed, value_s: 1.5}",
                                           "sim.service={base_s: 1, per_sequence_s: 0.1, max_batch: 4}",
                                           "sim.trainer.eval_s=30"])
    turns = cfg.sim.rollout.turns
    assert (turns.passing, turns.failing) == ([2, 3], 9)
    assert (cfg.sim.service.base_s, cfg.sim.service.max_batch, cfg.sim.trainer.eval_s) == (1.0, 4, 30.0)
    with pytest.raises(ConfigError) as info:
        load_sim_config(None, overrides=["sim.rollout.turns={passing: [], failing: [2, 0]}", "sim.service.max_batch=0"])
    expected = [  # one problem for each bad key (the override that set it before)
        "sim.rollout.turns.passing: must be an integer from 1 to 1,000,000, or a non-empty list of them; got []",
        "sim.rollout.turns.failing: must be an integer from 1 to 1,000,000, or a non-empty list of them; got [2, 0]",
        "sim.service.max_batch: must be at least 1, got 0",
    ]
    assert len(info.value.problems) == 3
    assert all(p.endswith(": " + e) for p, e in zip(info.value.problems, expected, strict=True))
    (tmp_path / "run.yaml").write_text(TRAIN + "environments:\n  - {name: a, sim: {service: {base_s: 1}}}\n")
    with pytest.raises(ConfigError, match="environments.0.sim.service: the run's alone"):
        build_tasks(load_sim_config(tmp_path / "run.yaml"))


def test_keys_turns_replaces_and_a_service_without_turns_are_warned_about(tmp_path):
    from platoon.config.loader import load_config_warnings

    turns = "sim.rollout.turns={passing: 3, failing: 5}"
    # the preset sets duration, fail_duration, model_calls and length_sigma: under turns (no env steps) none acts
    warned = load_config_warnings(load_sim_config(None, overrides=[turns]))
    assert warned == ["sim.rollout.duration, sim.rollout.fail_duration, sim.rollout.model_calls, "
                      "sim.rollout.length_sigma: no effect under sim.rollout.turns (a rollout's time is its turns' "
                      "model calls and environment steps; a task's length stretches env_step_s)"]
    stepped = load_sim_config(None, overrides=[turns, "sim.rollout.env_step_s={dist: fixed, value_s: 1}"])
    assert "sim.rollout.length_sigma" not in load_config_warnings(stepped)[0]
    assert load_config_warnings(load_sim_config(None, overrides=["sim.service.base_s=1"])) == [
        "sim.service: no effect without sim.rollout.turns (only turns queue model calls at the service)"]
    assert load_config_warnings(load_sim_config(None, overrides=["sim.trainer.service_slowdown=0.5"])) == [
        "sim.trainer.service_slowdown: no effect without sim.rollout.turns (no model service runs batches beside "
        "the trainer)"]
    slowed = load_sim_config(None, overrides=[turns, "sim.trainer.service_slowdown=0.5"])
    assert not any("service_slowdown" in w for w in load_config_warnings(slowed))
    assert load_config_warnings(load_sim_config(None)) == []
    # one entry with turns: the run's duration still acts for the other, the entry's own duration does not
    (tmp_path / "run.yaml").write_text(
        TRAIN + "environments:\n  - {name: a, env: platoon-number-search}\n"
        "  - {name: b, env: platoon-number-search, sim: {rollout: {turns: {passing: 2, failing: 4}, "
        "duration: {dist: fixed, value_s: 1}}}}\n"
        "sim: {service: {base_s: 1}, rollout: {duration: {dist: fixed, value_s: 5}}}\n")
    assert load_config_warnings(load_sim_config(tmp_path / "run.yaml")) == [
        "environments.1.sim.rollout.duration: no effect under sim.rollout.turns (a rollout's time is its turns' "
        "model calls and environment steps; a task's length stretches env_step_s)"]


def test_an_entry_keeps_its_tasks_or_the_ones_it_selects(tmp_path):
    (tmp_path / "run.yaml").write_text(
        TRAIN + "environments:\n  - {name: a, tasks: [t3, t1, t2]}\n"
        "  - {name: b, tasks: [t3, t1, t2], exclude_tasks: [t1]}\n")
    tasks = build_tasks(load_sim_config(tmp_path / "run.yaml"))
    a, b = tasks.entries
    assert a.task_ids == ["t3", "t1", "t2"] and b.task_ids == ["t3", "t2"]
    assert len(b.difficulty) == len(b.length) == len(b.data) == 2
    assert b.difficulty.tolist() == a.difficulty[[0, 2]].tolist()  # same seed and ids: the same draws
    assert tasks.pool.task_ids == ("a::t3", "a::t1", "a::t2", "b::t3", "b::t2")
    assert tasks.learner.difficulty.tolist() == [*a.difficulty.tolist(), *b.difficulty.tolist()]
