"""platoon calibrate's pieces: the fits, the workload file, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from platoon.config.errors import ConfigError
from platoon.sim.calibrate import (
    CalibrationError,
    calibrate,
    covered_s,
    difficulty_for,
    linear_fit,
    mean_pass_rate,
    nonneg_fit,
    read_workload,
)


def test_a_linear_fit_recovers_its_line_and_keeps_both_terms_non_negative():
    x = np.arange(1, 65, dtype=float)
    a, b, r2, rel = linear_fit(x, 0.02 + 0.003 * x)
    assert (a, b) == pytest.approx((0.02, 0.003)) and r2 == pytest.approx(1.0) and rel == pytest.approx(0.0)
    a, b, _, _ = linear_fit(x, 0.5 - 0.001 * x)  # a falling line is no batch cost: the mean, flat
    assert b == 0.0 and a == pytest.approx(np.mean(0.5 - 0.001 * x))
    a, b, _, _ = linear_fit([1.0, 2.0, 3.0], [0.9, 2.0, 3.1])  # a negative intercept: through the origin
    assert a == 0.0 and b > 0


@pytest.mark.parametrize("share", [0.05, 0.3, 0.5, 0.9])
def test_the_population_difficulty_gives_the_measured_pass_share(share):
    d = difficulty_for(share, 1.5)
    assert mean_pass_rate(-d, 1.5) == pytest.approx(share, abs=1e-4)


def test_a_run_that_is_not_live_or_has_no_trace_is_refused(tmp_path):
    with pytest.raises(CalibrationError, match="not a run directory"):
        calibrate(tmp_path)
    (tmp_path / "lock.json").write_text('{"runtime": "ray", "config": {}}\n')
    with pytest.raises(CalibrationError, match="no known runtime"):
        calibrate(tmp_path)
    (tmp_path / "lock.json").write_text('{"runtime": "live", "config": {}}\n')
    with pytest.raises(CalibrationError, match="no spans"):
        calibrate(tmp_path)


def test_a_workload_file_is_checked_as_a_sim_block(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("sim: {trainer: {step_s: -1}}\n")
    with pytest.raises(ConfigError) as info:
        read_workload(path)
    assert info.value.problems == ["sim.trainer.step_s: must be at least 0.0, got -1"]
    path.write_text("train: {}\nsim: {}\n")
    with pytest.raises(ConfigError, match="holds one mapping, sim"):
        read_workload(path)
    path.write_text("sim: {trainer: {step_s: 2.0}}\n")
    assert read_workload(path) == {"trainer": {"step_s": 2.0}}


def test_calibrating_a_simulated_run_recovers_its_workload(tmp_path):
    """The simulator's own trace, made with a known workload, fits back to it: counts exactly, times within 2%, the
    trainer's slowing by the model service within 2% (the trace's microseconds are its only error)."""
    from simkit import config, run

    known = {"rollout": {"turns": {"passing": [2, 3], "failing": 6},
                         "env_step_s": {"dist": "fixed", "value_s": 0.5}},
             "service": {"base_s": 1.0, "per_sequence_s": 0.05, "max_batch": 16, "handoff_s": 0.2},
             "trainer": {"step_s": 5.0, "per_datum_s": 0.1, "publish_s": 1.0, "eval_s": 2.0, "service_slowdown": 0.8},
             "population": {"tasks": 40, "heldout": 20, "difficulty_mean": 0.0, "difficulty_sd": 1.0},
             "learning": {"enabled": False}}
    cfg = config(train={"max_training_steps": 30, "max_concurrent_rollouts": 32}, sim=known,
                 trace={"group_every": 1}, eval={"every": 10, "at_start": True})
    run(cfg, tmp_path / "run")
    fitted = calibrate(tmp_path / "run").sim
    turns = fitted["rollout"]["turns"]
    assert set(turns["passing"]) == {2, 3} and set(turns["failing"]) == {6}
    assert np.median(fitted["rollout"]["env_step_s"]["values"]) == pytest.approx(0.5, rel=0.02)
    assert fitted["rollout"]["first_call_s"] is None
    service = fitted["service"]
    assert (service["base_s"], service["per_sequence_s"], service["handoff_s"]) == pytest.approx((1.0, 0.05, 0.2),
                                                                                                 rel=0.02)
    assert service["max_batch"] == 256  # the run's model.max_batch: the live service's, not the simulated one's
    trainer = fitted["trainer"]
    datums = 4 * 4  # every group of the batch trains its 4 rollouts
    assert trainer["step_s"] + trainer["per_datum_s"] * datums == pytest.approx(5.0 + 0.1 * datums, rel=0.02)
    assert (trainer["publish_s"], trainer["eval_s"]) == pytest.approx((1.0, 2.0), rel=0.02)
    assert trainer["service_slowdown"] == pytest.approx(0.8, rel=0.02)
    population = fitted["population"]
    assert population["tasks"] == 40 and fitted["learning"] == {"enabled": False}
    assert population["difficulty_sd"] == pytest.approx(1.0, abs=0.35)  # from 30 steps' groups of a population


@pytest.mark.parametrize("max_num_seqs", [64, 6])
def test_calibrating_a_simulated_vllm_deployment_recovers_its_servers(tmp_path, max_num_seqs):
    """Under train.inference.engine: vllm the servers' timing fits from the model calls' spans and the load each saw
    (at 6 running at once the servers' cap binds and requests take turns), the pause from the pause spans."""
    from simkit import config, run

    known = {"rollout": {"turns": {"passing": 3, "failing": 5}, "env_step_s": {"dist": "exponential", "mean_s": 2.0}},
             "service": {"base_s": 1.0, "per_sequence_s": 0.1, "max_batch": max_num_seqs, "pause_s": 0.5},
             "learning": {"enabled": False}}
    inference = {"engine": "vllm", "launch": {"python": "python", "servers": 3,
                                              "args": ["--max-num-seqs", str(max_num_seqs)]}}
    cfg = config(train={"model_name": "org/model", "max_training_steps": 12, "max_concurrent_rollouts": 32,
                        "max_staleness": 4, "inference": inference}, sim=known, trace={"group_every": 1})
    run(cfg, tmp_path / "run")
    service = calibrate(tmp_path / "run").sim["service"]
    assert (service["base_s"], service["per_sequence_s"]) == pytest.approx((1.0, 0.1), rel=0.05)
    assert service["pause_s"] == pytest.approx(0.5, rel=1e-3)
    assert service["max_batch"] == max_num_seqs


@pytest.mark.slow
@pytest.mark.live
def test_like_simulates_a_small_live_runs_twin_and_the_report_lays_them_side_by_side(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from platoon.cli import app
    from platoon.live.launch import command

    live, twin, report = tmp_path / "live", tmp_path / "twin", tmp_path / "report"
    command.train(None, ["environments.0.workflow_config.group_size=4", "environments.0.service_kwargs={ranges: [4, 8]}",
                         "train.batch_size=4", "train.max_training_steps=6", "eval.every=0", "model.d_model=16",
                         "model.n_layers=1", "trace.group_every=1"], out=live, progress=False, eval_episodes=32)
    runner = CliRunner()
    fitted = runner.invoke(app, ["calibrate", str(live), "-o", str(tmp_path / "workload.yaml")])
    assert fitted.exit_code == 0, fitted.stdout + fitted.stderr
    assert read_workload(tmp_path / "workload.yaml")["rollout"]["turns"]
    result = runner.invoke(app, ["simulate", "--like", str(live), "--out", str(twin)])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "no effect" not in result.stdout + result.stderr  # the recorded config warns of nothing it did not set
    result = runner.invoke(app, ["report", str(live), str(twin), "--out", str(report)])
    assert result.exit_code == 0, result.stdout + result.stderr
    table = (report / "summary.md").read_text()
    assert table.splitlines()[0] == "| | live | twin | error |"
    steps = next(line for line in table.splitlines() if line.startswith("| steps |"))
    assert steps == "| steps | 6 | 6 | +0.0% |"


def test_a_fit_of_two_variables_keeps_every_term_non_negative():
    rng = np.random.default_rng(0)
    x1, x2 = rng.uniform(0, 10, 50), rng.uniform(0, 5, 50)
    (a, b, c), r2, rel = nonneg_fit(1.0 + 0.2 * x1 + 0.5 * x2, x1, x2)
    assert (a, b, c) == pytest.approx((1.0, 0.2, 0.5)) and r2 == pytest.approx(1.0) and rel < 1e-9
    (a, b, c), _, _ = nonneg_fit(1.0 + 0.2 * x1 - 0.1 * x2, x1, x2)  # a term that would come out negative is 0
    assert c == 0.0 and a > 0 and b == pytest.approx(0.2, rel=0.05)
    (a, b, c), _, _ = nonneg_fit(2.0 + 0.5 * x2, np.full(50, 16.0), x2)  # a variable that never varies: 0
    assert (a, b, c) == pytest.approx((2.0, 0.0, 0.5))


def test_the_time_spans_cover_is_the_union_of_the_covering_spans():
    spans = [{"ts": 0, "dur": 10_000_000}, {"ts": 20_000_000, "dur": 5_000_000}, {"ts": 40_000_000, "dur": 1}]
    by = [{"ts": 2_000_000, "dur": 3_000_000}, {"ts": 4_000_000, "dur": 2_000_000},  # overlapping: 2 s to 6 s
          {"ts": 9_000_000, "dur": 12_000_000}]  # across the first span's end and the second's start
    assert covered_s(spans, by).tolist() == pytest.approx([4.0 + 1.0, 1.0, 0.0])
    assert covered_s(spans, []).tolist() == [0.0, 0.0, 0.0]


def test_calibrating_a_simulated_run_recovers_its_learning_model(tmp_path):
    """A simulated run of the built-in game's tasks in similarity groups (range and guesses), with a known learning
    model, fits back to it: the own-task gain and the every-task change within a third, the group's change with its
    sign, the half-life from the grid's neighbours; and the workload simulates."""
    from simkit import config, run

    known = {"gain": 0.3, "transfer": 0.05, "label_gain": -0.01, "forget_half_life": 32.0,
             "similar_by": ["range", "guesses"]}
    cfg = config(train={"max_training_steps": 150, "batch_size": 16, "max_concurrent_rollouts": 128,
                        "task_sampler": "pass_rate"},
                 environments=[{"name": "env", "workflow_config": {"group_size": 8}}],
                 sim={"rollout": {"turns": {"passing": 2, "failing": 4}, "env_step_s": {"dist": "fixed", "value_s": 0.5}},
                      "service": {"base_s": 0.2, "per_sequence_s": 0.01, "max_batch": 64},
                      "population": {"difficulty_mean": 1.5, "difficulty_sd": 1.0}, "learning": known},
                 eval={"every": 50, "at_start": True})
    run(cfg, tmp_path / "run")
    learning = calibrate(tmp_path / "run", ["range", "guesses"]).sim["learning"]
    assert learning["gain"] == pytest.approx(0.3, rel=0.33)
    assert learning["gain"] * learning["transfer"] == pytest.approx(0.015, rel=0.33)
    assert learning["label_gain"] < 0 and learning["forget_half_life"] in (16.0, 32.0, 64.0)
    assert learning["similar_by"] == ["range", "guesses"] and len(learning["label_difficulty"]) == 20
