"""platoon calibrate's pieces: the fits, the workload file, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from platoon.config.errors import ConfigError
from platoon.sim.calibrate import (
    CalibrationError,
    calibrate,
    difficulty_for,
    linear_fit,
    mean_pass_rate,
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
    (tmp_path / "lock.json").write_text('{"runtime": "sim", "config": {}}\n')
    with pytest.raises(CalibrationError, match="a sim run"):
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
