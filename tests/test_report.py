"""``platoon report`` and ``platoon.report.summarize`` on run directories written by hand in the vocabulary of
docs/metrics.md: a simulated run, and a live run resumed once: its clock goes on from its checkpoint's, or, as
platoon 0.4.0 wrote it, restarts at 0 with the new start."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from platoon.analysis import load_run
from platoon.cli import app
from platoon.report import SUMMARY, step_lengths, summarize, summary_markdown, write_report
from platoon.runs import RunDir, metrics_row

PNG = b"\x89PNG\r\n\x1a\n"


def both(step: int, *, busy: float, rollouts: float, dt: float) -> dict:
    """A step's metrics that both runtimes write (docs/metrics.md)."""
    return {
        "rollout_client/permits_held_mean": 10.0 * (step + 1),
        "rollout_client/rollouts_in_flight_mean": 8.0 * (step + 1),
        "rollout_client/concurrency_achieved_fraction": busy,
        "rollout_client/permit_busy_share": busy,
        "train/trainer_idle_share": 0.25,
        "train/rollouts": rollouts, "train/rollouts_per_hour": rollouts * 3600 / dt,
        "train/wasted_rollouts/stale": 4.0, "train/wasted_rollouts/rejected": 0.0,
        "train/wasted_rollouts/failed": 0.0, "train/wasted_rollouts/cancelled": 0.0,
        "train/batch/informative_groups": 3.0, "train/batch/all_pass_groups": 1.0,
        "train/batch/all_fail_groups": 0.0, "train/batch/uniform_mixed_groups": 0.0,
        "train/batch/stale_groups": 1.0, "train/sampler/informative_share": 0.75,
        "train/staleness/0": 3.0, "train/staleness/1": 1.0 + step, "train/staleness/2": 0.0,
        "train/staleness_mean": 0.25 * (step + 1),
        "train/reward_mean": 0.5, "train/pass_rate": 0.5, "train/informative_share": 0.75,
        "train/dispatch/blocked_share/permits": 0.5, "train/dispatch/blocked_share/horizon": 0.25,
    }


def simulated(path):
    """Two steps at simulated seconds 100 and 400, under a group admission rule; the final evaluation at 420."""
    rd = RunDir.create(path)
    rd.write_lock({"train": {"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 2,
                             "max_concurrent_rollouts": 16}}, [], {"runtime": "sim"})
    with rd.metrics_writer() as w:
        for step, t, dt, busy in ((0, 100.0, 100.0, 0.5), (1, 400.0, 300.0, 1.0)):
            w.write(metrics_row(step, t, {
                **both(step, busy=busy, rollouts=30.0, dt=dt),
                "train/admission/rejected": 2.0, "train/admission/groups_admitted": 4.0,
                "sim/simulated_seconds": t, "sim/gpu_hours": t / 3600 * 8, "sim/train_pass_rate_mean": 0.3,
                **({"eval/pass@1": 0.25} if step == 0 else {})}))
        w.write(metrics_row(2, 420.0, {"eval/pass@1": 0.5}))
    return path


def live(path, clock_s: float = 0.0):
    """Five steps over two starts: the first writes steps 0-2 (wall seconds 10, 20, 30) and step 3 (at 40) before
    it dies; the second goes on from the checkpoint after step 2, taken at ``clock_s`` on the run's clock (0: as
    platoon 0.4.0 wrote it, the clock starts again at 0), writes steps 3 and 4 (5 and 15 s into the new start) and
    the final evaluation (18 s in). No group admission rule."""
    rd = RunDir.create(path)
    rd.write_lock({"train": {"steps": 5}}, [], {"runtime": "live"})
    with rd.metrics_writer() as w:
        for step, t, dt, busy in ((0, 10.0, 10.0, 0.5), (1, 20.0, 10.0, 0.5), (2, 30.0, 10.0, 0.5),
                                  (3, 40.0, 10.0, 0.0), (3, clock_s + 5.0, 5.0, 1.0),
                                  (4, clock_s + 15.0, 10.0, 1.0)):
            w.write(metrics_row(step, t, {
                **both(step, busy=busy, rollouts=8.0, dt=dt),
                "trainer/loss": 0.1, "trainer/grad_norm": 1.0,
                **({"eval/pass@1": 0.2, "eval/pass@1_ci_low": 0.1, "eval/pass@1_ci_high": 0.3,
                    "eval/episodes": 64.0} if step == 0 else {})}))
        w.write(metrics_row(5, clock_s + 18.0, {"eval/pass@1": 0.4, "eval/pass@1_ci_low": 0.3, "eval/pass@1_ci_high": 0.5,
                                      "eval/episodes": 64.0}))
    return path


def test_step_lengths_on_the_runs_clock():
    assert step_lengths(pd.Series([10.0, 20.0, 30.0, 37.0, 47.0])).tolist() == [10.0, 10.0, 10.0, 7.0, 10.0]
    # a drop (a live run of platoon 0.4.0, whose clock began at 0 again at each resume) begins a new start
    times = [10.0, 20.0, 30.0, 5.0, 15.0]
    assert step_lengths(pd.Series(times)).tolist() == [10.0, 10.0, 10.0, 5.0, 10.0]


def test_summary_of_a_simulated_run(tmp_path):
    s = summarize(load_run(simulated(tmp_path / "sim")))
    assert s["steps"] == 2  # the final evaluation row is not a step
    assert s["hours"] == pytest.approx(400 / 3600)  # to the last step's row
    assert s["rollouts_per_hour"] == pytest.approx(60 / (400 / 3600))
    assert s["groups_per_hour"] == pytest.approx(8 / (400 / 3600))
    assert s["permit_busy_share"] == pytest.approx((0.5 * 100 + 1.0 * 300) / 400)  # weighted by step length
    assert s["trainer_idle_share"] == pytest.approx(0.25)
    assert s["staleness_mean"] == pytest.approx((0.25 * 4 + 0.5 * 4) / 8)  # weighted by the groups trained
    assert s["informative_share"] == pytest.approx(6 / 8)
    assert s["stale_groups"] == 2 and s["rejected_groups"] == 4
    assert (s["pass_at_1_first"], s["pass_at_1_last"]) == (0.25, 0.5)
    assert s["gpu_hours"] == pytest.approx(400 / 3600 * 8)


def test_summary_of_a_resumed_live_run_on_one_clock(tmp_path):
    s = summarize(load_run(live(tmp_path / "live", clock_s=32.0)))
    # the second start's clock began at the checkpoint's, 32 s: step 3 took 30 -> 37 s (the checkpoint's capture
    # after step 2's row included), step 4 37 -> 47 s; the time the run was down is on no clock
    assert s["steps"] == 5
    assert s["hours"] == pytest.approx(47 / 3600)
    assert s["rollouts_per_hour"] == pytest.approx(5 * 8 / (47 / 3600))
    assert s["permit_busy_share"] == pytest.approx((0.5 * 30 + 1.0 * 17) / 47)


def test_summary_of_a_resumed_live_run_of_platoon_0_4_counts_each_starts_clock(tmp_path):
    s = summarize(load_run(live(tmp_path / "live")))
    assert s["steps"] == 5
    # 10 + 10 + 10 s in the first start, 5 + 10 s in the second (its clock restarted at 0); the step the first start
    # wrote at 40 s was redone, and the final evaluation at 18 s comes after the last step
    assert s["hours"] == pytest.approx(45 / 3600)
    assert s["groups_per_hour"] == pytest.approx(5 * 4 / (45 / 3600))
    assert s["rollouts_per_hour"] == pytest.approx(5 * 8 / (45 / 3600))
    assert s["permit_busy_share"] == pytest.approx((0.5 * 30 + 1.0 * 15) / 45)
    assert s["trainer_idle_share"] == pytest.approx(0.25)
    assert s["staleness_mean"] == pytest.approx((0.25 + 0.5 + 0.75 + 1.0 + 1.25) / 5)
    assert s["rejected_groups"] == 0  # no admission rule: nothing is rejected
    assert (s["pass_at_1_first"], s["pass_at_1_last"]) == (0.2, 0.4)
    assert math.isnan(s["gpu_hours"])


def test_the_old_names_are_not_read(tmp_path):
    rd = RunDir.create(tmp_path / "old")
    rd.write_lock({}, [], {"runtime": "sim"})
    with rd.metrics_writer() as w:
        w.write(metrics_row(0, 60.0, {"rollout_client/concurrency_achieved_fraction": 0.5,
                                      "sim/permit_busy_share": 0.5, "sim/trainer_idle_share": 0.5,
                                      "sim/rollouts": 10.0, "sim/staleness_mean": 1.0}))
    s = summarize(load_run(rd.path))
    for key in ("permit_busy_share", "trainer_idle_share", "rollouts_per_hour", "staleness_mean"):
        assert math.isnan(s[key]), key


def _columns(table: str) -> dict[str, list[str]]:
    """``summary.md`` as {label: [cell per run]}."""
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_a_live_run_has_a_value_in_every_row_that_applies_to_it(tmp_path):
    runs = [load_run(simulated(tmp_path / "sim")), load_run(live(tmp_path / "live"))]
    table = _columns(summary_markdown(runs))
    assert list(table) == [label for _, label, _ in SUMMARY]
    for label, (sim, live_cell) in table.items():
        assert sim != "-", label
        if label == "GPU-hours":
            assert live_cell == "sim only"
        else:
            assert live_cell not in ("-", "", "sim only", "live only"), label
    assert table["throughput (trained groups/h)"] == ["72.0", "1600.0"]
    assert table["trainer idle share"] == ["0.250", "0.250"]


def test_report_writes_a_table_and_four_plots(tmp_path):
    runs = [load_run(simulated(tmp_path / "sim")), load_run(live(tmp_path / "live"))]
    written = write_report(runs, tmp_path / "out")
    assert sorted(p.name for p in written) == ["blocked.png", "learning.png", "permits.png", "staleness.png",
                                               "summary.md"]
    for p in written:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000
    table = (tmp_path / "out" / "summary.md").read_text()
    assert table.splitlines()[0] == "| | sim | live |"
    assert "| permit busy share | 0.875 | 0.667 |" in table
    assert "| GPU-hours | 0.9 | sim only |" in table
    assert summary_markdown(runs).count("\n") == 2 + len(SUMMARY)


def test_each_plot_asks_its_question_in_words_with_its_limit_and_a_legend_per_panel(tmp_path, monkeypatch):
    import platoon.report as report

    figures = {}
    real = report.write_figure

    def keep(path, fig):
        figures[path.name] = fig
        return real(path, fig)

    monkeypatch.setattr(report, "write_figure", keep)
    runs = [load_run(simulated(tmp_path / "sim")), load_run(live(tmp_path / "live"))]
    write_report(runs, tmp_path / "out")
    permits = figures["permits.png"].axes[0]
    assert permits.get_title() == "Are the rollout permits busy?" and "busy" in permits.get_ylabel()
    assert "(h)" in permits.get_xlabel()
    assert "sim: capacity (16 permits)" in permits.get_legend_handles_labels()[1]  # the lock's max_concurrent_rollouts
    assert [ln.get_ydata()[0] for ln in permits.get_lines() if ln.get_linestyle() == "--"] == [16]
    staleness = figures["staleness.png"].axes[0]
    assert staleness.get_title().endswith("?")
    assert all(float(t).is_integer() for t in staleness.get_xticks())  # whole versions, no 0.5
    top, bottom = figures["learning.png"].axes
    assert bottom.get_ylabel() == "held-out pass@1" and top.get_legend() and bottom.get_legend()
    blocked = figures["blocked.png"]
    assert all(ax.get_ylabel() == "share of the step's time" and ax.get_title().endswith("why could no group start?")
               for ax in blocked.axes)
    [legend] = blocked.legends  # one legend, below the panels, every term defined
    assert [t.get_text() for t in legend.get_texts()][:2] == ["permits: every permit is held",
                                                               "horizon: the horizon (max_staleness) has no room"]


def test_a_run_without_pass_at_1_is_named_in_the_learning_plot(tmp_path, monkeypatch):
    import platoon.report as report

    figures = {}
    monkeypatch.setattr(report, "write_figure", lambda path, fig: figures.setdefault(path.name, fig) and path)
    rd = RunDir.create(tmp_path / "twin")
    rd.write_lock({"train": {"steps": 1}}, [], {"runtime": "sim"})
    with rd.metrics_writer() as w:
        w.write(metrics_row(0, 10.0, both(0, busy=0.5, rollouts=8.0, dt=10.0)))
    write_report([load_run(tmp_path / "twin")], tmp_path / "out")
    bottom = figures["learning.png"].axes[1]
    assert [t.get_text() for t in bottom.texts] == ["no held-out pass@1 measured: twin"]


def test_the_command(tmp_path):
    a, b = simulated(tmp_path / "a"), live(tmp_path / "b")
    result = CliRunner().invoke(app, ["report", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert (a / "report" / "summary.md").exists() and (a / "report" / "blocked.png").exists()
    result = CliRunner().invoke(app, ["report", str(a), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0 and (tmp_path / "r" / "permits.png").exists()
    assert CliRunner().invoke(app, ["report", str(tmp_path / "missing")]).exit_code == 1


def test_a_summary_streams_past_the_event_log(tmp_path):
    """The end-of-run summary reads the metrics only: an event log of 100,000 lines (a few thousand simulated steps
    write millions) does not come into memory."""
    import json
    import tracemalloc

    from platoon.report import summary_table, sweep_markdown

    run = simulated(tmp_path / "sim")
    line = json.dumps({"event": "draw", "start": 1, "seq": 0, "task_id": "t-0001", "position": 0, "version": 0,
                       "sampler": "uniform", "reason": "fresh"}) + "\n"
    (run / "tasks" / "events.jsonl").write_text(line * 100_000)
    tracemalloc.start()
    try:
        summary_table(run)
        sweep_markdown([["train.seed=0"]], [run])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, f"the summary held {peak / 1e6:.0f} MB"
