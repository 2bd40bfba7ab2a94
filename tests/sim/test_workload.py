"""Workload draws: distributions, purity per (seed, group key, member), coupling, time limit, empirical files."""

from __future__ import annotations

import math

import numpy as np
import pytest

from platoon.config.sim import SimRolloutConfig
from platoon.sim.workload import DurationDist, Workload, read_durations


def rollout(**kw) -> SimRolloutConfig:
    return SimRolloutConfig.model_validate(kw)


def test_a_group_is_a_pure_function_of_seed_and_key():
    w = Workload(rollout(duration={"dist": "exponential", "mean_s": 5.0}, error_rate=0.3, invalid_rate=0.2))
    a = w.group(7, (1, 42), 8, 1.0)
    w.group(7, (1, 43), 8, 1.0)  # another group drawn in between changes nothing
    b = w.group(7, (1, 42), 8, 1.0)
    assert a == b
    assert a != w.group(8, (1, 42), 8, 1.0)
    assert a != w.group(7, (2, 42), 8, 1.0)
    assert [a.member(i, 0.5) for i in range(8)] == [b.member(i, 0.5) for i in range(8)]


def test_members_differ_and_length_multiplies_runs():
    w = Workload(rollout(duration={"dist": "lognormal", "median_s": 10.0, "sigma": 1.0}))
    g1 = w.group(0, (1, 0), 8, 1.0)
    g3 = w.group(0, (1, 0), 8, 3.0)
    assert len(set(g1.passed_run_s)) == 8
    assert g3.passed_run_s == pytest.approx([3 * x for x in g1.passed_run_s])


def test_pass_is_coupled_to_the_rate():
    """Raising a task's pass rate turns failures into passes, never the other way round."""
    w = Workload(rollout())
    for seq in range(50):
        g = w.group(3, (1, seq), 4, 1.0)
        for i in range(4):
            low, high = g.member(i, 0.3), g.member(i, 0.7)
            assert not (low.passed and not high.passed)


def test_fail_duration_and_time_limit():
    w = Workload(rollout(duration={"dist": "fixed", "value_s": 10.0},
                         fail_duration={"dist": "fixed", "value_s": 50.0}, timeout_s=30.0))
    g = w.group(0, (1, 0), 4, 1.0)
    assert all(g.member(i, 1.0).run_s == 10.0 and g.member(i, 1.0).passed for i in range(4))
    failed = [g.member(i, 0.0) for i in range(4)]
    assert all(m.run_s == 30.0 and not m.passed for m in failed)
    long = Workload(rollout(duration={"dist": "fixed", "value_s": 40.0}, timeout_s=30.0)).group(0, (1, 0), 2, 1.0)
    assert not long.member(0, 1.0).passed and long.member(0, 1.0).run_s == 30.0


def test_error_and_invalid_rates_are_shares():
    w = Workload(rollout(error_rate=0.2, invalid_rate=0.1))
    members = [w.group(1, (1, s), 8, 1.0).member(i, 0.5) for s in range(500) for i in range(8)]
    errors = sum(m.error_at_s is not None for m in members) / len(members)
    invalid = sum(not m.valid for m in members) / len(members)
    assert errors == pytest.approx(0.2, abs=0.02)
    assert invalid == pytest.approx(0.1, abs=0.02)
    assert all(0 <= m.error_at_s <= m.run_s for m in members if m.error_at_s is not None)


@pytest.mark.parametrize("dist", [
    {"dist": "fixed", "value_s": 3.0},
    {"dist": "exponential", "mean_s": 3.0},
    {"dist": "lognormal", "median_s": 2.0, "sigma": 0.5},
    {"dist": "empirical", "values": [1.0, 2.0, 6.0]},
])
def test_sample_means_match(dist):
    d = DurationDist(rollout(duration=dist).duration)
    rng = np.random.default_rng(0)
    x = d(rng.random(200_000), rng.standard_normal(200_000))
    assert x.mean() == pytest.approx(d.mean(), rel=0.02)
    assert (x >= 0).all()


def test_lognormal_median():
    d = DurationDist(rollout(duration={"dist": "lognormal", "median_s": 240.0, "sigma": 0.8}).duration)
    rng = np.random.default_rng(1)
    assert float(np.median(d(rng.random(100_000), rng.standard_normal(100_000)))) == pytest.approx(240, rel=0.02)
    assert d.mean() == pytest.approx(240 * math.exp(0.32))


def test_empirical_files(tmp_path):
    (tmp_path / "a.txt").write_text("# seconds\n1.5\n\n2.5\n")
    (tmp_path / "b.json").write_text("[1, 2, 3]")
    (tmp_path / "c.csv").write_text("task_id,seconds\nx,4\ny,5\n")
    assert read_durations(tmp_path / "a.txt") == [1.5, 2.5]
    assert read_durations(tmp_path / "b.json") == [1.0, 2.0, 3.0]
    assert read_durations(tmp_path / "c.csv") == [4.0, 5.0]
    (tmp_path / "bad.txt").write_text("1\n-2\n")
    with pytest.raises(ValueError, match="at least 0"):
        read_durations(tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="cannot read"):
        read_durations(tmp_path / "missing.txt")
    d = DurationDist(rollout(duration={"dist": "empirical", "file": str(tmp_path / "b.json")}).duration)
    assert set(d(np.linspace(0, 0.999, 30), np.zeros(30)).tolist()) == {1.0, 2.0, 3.0}


def test_turns_by_outcome_from_one_draw_and_env_steps_per_turn():
    """A member's passing and failing counts come from one uniform (empirical lists: values[floor(u n)]), its env
    steps are its task's length times draws of their own, one per turn; a raising member raises in one of its
    turns; the same seed and key give the same draws."""
    w = Workload(rollout(turns={"passing": [1, 2, 3, 4], "failing": [10, 20, 30, 40]}, error_rate=0.5,
                         env_step_s={"dist": "exponential", "mean_s": 2.0}))
    g = w.group(3, (1, 5), 64, 1.0)
    assert g == w.group(3, (1, 5), 64, 1.0)
    assert [10 * p for p in g.turns.passing] == g.turns.failing  # the same quantile of each list
    assert set(g.turns.passing) == {1, 2, 3, 4}
    long = w.group(3, (1, 5), 64, 2.5)
    errors = 0
    for i in range(64):
        passed, failed = g.member(i, 1.0), g.member(i, 0.0)
        assert (passed.turns, failed.turns) == (g.turns.passing[i], g.turns.failing[i])
        assert len(failed.env_steps) == failed.turns and passed.env_steps == failed.env_steps[:passed.turns]
        assert long.member(i, 0.0).env_steps == pytest.approx([2.5 * s for s in failed.env_steps])
        assert (passed.run_s, passed.error_at_s) == (0.0, None)
        if failed.error_turn is not None:
            errors += 1
            assert 1 <= failed.error_turn <= failed.turns
    assert 16 < errors < 48
    steps = [s for i in range(64) for s in g.member(i, 0.0).env_steps]
    assert np.mean(steps) == pytest.approx(2.0, rel=0.1)
    without = Workload(rollout(turns={"passing": 3, "failing": 5})).group(3, (1, 5), 8, 1.0)
    assert [without.member(i, 0.0).env_steps for i in range(8)] == [()] * 8
    # turns draw nothing from the rollout stream the durations use: a duration-mode group is unchanged
    assert Workload(rollout()).group(3, (1, 5), 8, 1.0).passed_run_s == without.passed_run_s
