"""``platoon train`` and ``platoon eval``: arguments, exit codes and what they print (CliRunner; small runs)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from platoon.cli import app
from platoon.live.launch.command import step_line

runner = CliRunner()
TRAIN = "train:\n  model_name: tiny\n  renderer_name: role_colon\n  max_training_steps: 2\n"
"""The keys every config file sets."""


def test_train_with_a_bad_config_exits_78_with_every_problem(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("train:\n  task_order: auto\n  batch_size: 0\n")
    result = runner.invoke(app, ["train", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 78
    assert "train.task_order" in result.output and "train.batch_size" in result.output
    assert not (tmp_path / "run").exists()


def test_train_with_a_bad_override_exits_78(tmp_path):
    result = runner.invoke(app, ["train", "--set", "train.permit_release=sometimes", "--out", str(tmp_path / "r")])
    assert result.exit_code == 78
    assert "train.permit_release" in result.output


def test_train_resume_of_a_directory_without_a_run_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["train", "--resume", str(tmp_path)])
    assert result.exit_code == 64
    assert "--resume" in result.output and "not a run directory (no lock.json)" in result.output


def test_train_resume_and_out_together_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["train", "--resume", str(tmp_path), "--out", str(tmp_path / "x")])
    assert result.exit_code == 64


def test_eval_of_a_config_prints_the_initial_policys_pass_at_1_with_an_interval(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"{TRAIN}environments:\n  - name: ns\n    env: platoon-number-search\n"
                      "    service_kwargs: {ranges: [4, 8]}\n")
    result = runner.invoke(app, ["eval", str(config), "--n", "200"])
    assert result.exit_code == 0, result.output
    match = re.search(r"held-out pass@1 (\d\.\d+) \(95% CI (\d\.\d+)-(\d\.\d+), 200 episodes\)", result.output)
    assert match, result.output
    p, low, high = map(float, match.groups())
    assert low <= p <= high and 0.0 < p < 0.6  # a random policy finds some targets of small ranges


def test_eval_by_task_writes_each_held_out_task_s_passes_summing_to_the_whole(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"{TRAIN}environments:\n  - name: ns\n    env: platoon-number-search\n"
                      "    service_kwargs: {ranges: [4, 8]}\n")
    result = runner.invoke(app, ["eval", str(config), "--n", "120", "--by-task", str(tmp_path / "tasks.csv")])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(tmp_path / "tasks.csv")
    p = float(re.search(r"held-out pass@1 (\d\.\d+)", result.output).group(1))
    assert frame["episodes"].sum() == 120 and frame["passes"].sum() / 120 == pytest.approx(p, abs=5e-4)
    assert frame["task_id"].is_unique and set(frame["entry"]) == {"ns"}
    assert (frame["pass@1"] == frame["passes"] / frame["episodes"]).all()
    assert {"columns/range", "columns/guesses", "columns/target"} <= set(frame.columns)
    assert runner.invoke(app, ["eval", str(config), "--by-task", str(tmp_path / "t.txt")]).exit_code == 64


def test_eval_of_a_bad_config_exits_78(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text(f"{TRAIN}environments:\n  - name: ns\n    env: no_such_env\n")
    assert runner.invoke(app, ["eval", str(config)]).exit_code == 78
    assert runner.invoke(app, ["eval", str(tmp_path / "missing.yaml")]).exit_code == 78


def test_the_step_line_names_what_the_issue_asks_for():
    line = step_line({"step": 3, "train/reward_mean": 0.41, "train/pass_rate": 0.25, "train/informative_share": 0.8,
                      "train/staleness_mean": 0.5, "rollout_client/permit_busy_share": 0.9, "eval/pass@1": 0.33})
    assert line.split() == ["step", "3", "reward", "0.410", "pass", "0.250", "informative", "0.800", "staleness",
                            "0.500", "permits", "busy", "0.900", "eval/pass@1", "0.330"]
    assert step_line({"step": 7, "eval/pass@1": 0.5}).split() == ["step", "7", "eval/pass@1", "0.500"]


def test_eval_of_a_run_measures_its_last_checkpoint(tmp_path):
    from live_harness import FakeService

    from platoon.live.launch.command import train

    def service(model, cfg, version):
        return FakeService(vocab=model.vocab_size)

    run = tmp_path / "run"
    train(None, ["train.max_training_steps=2", "train.batch_size=2", "environments.0.workflow_config.group_size=2",
                 "eval.every=null", "eval.at_start=false", "environments.0.service_kwargs={ranges: [4, 8]}"], out=run,
          progress=False, service_factory=service)
    result = runner.invoke(app, ["eval", str(run), "--n", "50"])
    assert result.exit_code == 0, result.output
    assert f"of {run} at step 2 (checkpoint 000002)" in result.output
    assert re.search(r"held-out pass@1 \d\.\d+ \(95% CI", result.output)


def small_run_config(tmp_path, log_path=None):
    config = tmp_path / "run.yaml"
    config.write_text(TRAIN + "  batch_size: 2\n  workflow_config: {group_size: 2}\n"
                      + (f"log_path: {log_path}\nstats: {{experiment_name: exp, trial_name: t1}}\n" if log_path else "")
                      + "environments:\n  - service_kwargs: {ranges: [4, 8]}\n")
    return config


def test_train_of_a_config_file_without_log_path_or_out_exits_78_naming_log_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", str(small_run_config(tmp_path))])
    assert result.exit_code == 78, result.output
    assert re.search(r"^\s*log_path: ", result.output, re.M), result.output
    assert not (tmp_path / "runs").exists()


def test_train_of_a_config_file_with_log_path_runs_in_log_path_experiment_trial(tmp_path):
    from live_harness import FakeService

    from platoon.live.launch.command import train

    def service(model, cfg, version):
        return FakeService(vocab=model.vocab_size)

    config = small_run_config(tmp_path, log_path=tmp_path / "logs")
    run = train(config, progress=False, service_factory=service, eval_episodes=16)
    assert run == tmp_path / "logs" / "exp" / "t1"
    assert (run / "lock.json").exists() and (run / "checkpoints" / "000002").is_dir()
