"""``platoon report`` and ``platoon.report.summarize`` on run directories written by hand (a simulated-looking run
and a live-looking one, which logs no ``sim/...`` metrics)."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from platoon.analysis import load_run
from platoon.cli import app
from platoon.report import summarize, summary_markdown, write_report
from platoon.runs import RunDir, metrics_row

PNG = b"\x89PNG\r\n\x1a\n"


def simulated(path):
    rd = RunDir.create(path)
    rd.write_lock({"train": {"steps": 2}}, [], {"runtime": "sim"})
    with rd.metrics_writer() as w:
        for step, t, busy in ((0, 100.0, 0.5), (1, 400.0, 1.0)):
            w.write(metrics_row(step, t, {
                "rollout_client/permits_held_mean": 10.0 * (step + 1),
                "rollout_client/concurrency_achieved_fraction": busy,
                "sim/permit_busy_share": busy, "sim/trainer_idle_share": 0.25, "sim/rollouts": 30.0,
                "train/batch/informative_groups": 3.0, "train/batch/all_pass_groups": 1.0,
                "train/batch/all_fail_groups": 0.0, "train/batch/uniform_mixed_groups": 0.0,
                "train/batch/stale_groups": 1.0, "train/sampler/informative_share": 0.75,
                "sim/staleness/0": 3.0, "sim/staleness/1": 1.0 + step, "sim/staleness_mean": 0.25,
                "train/admission/rejected": 2.0, "sim/gpu_hours": t / 3600 * 8,
                "train/dispatch/blocked_share/permits": 0.5, "train/dispatch/blocked_share/horizon": 0.25,
                **({"eval/pass@1": 0.25} if step == 0 else {})}))
        w.write(metrics_row(2, 420.0, {"eval/pass@1": 0.5}))
    return path


def live(path):
    rd = RunDir.create(path)
    with rd.metrics_writer() as w:
        for step in range(3):
            w.write(metrics_row(step, 10.0 * (step + 1), {
                "rollout_client/permits_held_mean": 4.0, "rollout_client/concurrency_achieved_fraction": 0.5,
                "train/batch/informative_groups": 1.0, "train/batch/all_fail_groups": 1.0,
                "train/dispatch/blocked_share/plan": 1.0}))
    return path


def test_summary_of_a_simulated_run(tmp_path):
    s = summarize(load_run(simulated(tmp_path / "sim")))
    assert s["steps"] == 2  # the final evaluation row is not a step
    assert s["simulated_hours"] == pytest.approx(420 / 3600)
    assert s["rollouts_per_hour"] == pytest.approx(60 / (420 / 3600))
    assert s["permit_busy_share"] == pytest.approx((0.5 * 100 + 1.0 * 300) / 400)  # weighted by step length
    assert s["informative_share"] == pytest.approx(6 / 8)
    assert s["stale_groups"] == 2 and s["rejected_groups"] == 4
    assert (s["pass_at_1_first"], s["pass_at_1_last"]) == (0.25, 0.5)
    assert s["gpu_hours"] == pytest.approx(400 / 3600 * 8)


def test_summary_of_a_live_run_uses_what_it_logged(tmp_path):
    s = summarize(load_run(live(tmp_path / "live")))
    assert s["steps"] == 3
    assert s["permit_busy_share"] == 0.5  # concurrency_achieved_fraction stands in for the sim's busy share
    assert s["informative_share"] == 0.5
    assert math.isnan(s["trainer_idle_share"]) and math.isnan(s["pass_at_1_last"])
    assert math.isnan(s["rejected_groups"])


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
    assert "| permit busy share | 0.875 | 0.500 |" in table
    assert "| trainer idle share | 0.250 | - |" in table
    assert summary_markdown(runs).count("\n") == 2 + 13


def test_the_command(tmp_path):
    a, b = simulated(tmp_path / "a"), live(tmp_path / "b")
    result = CliRunner().invoke(app, ["report", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert (a / "report" / "summary.md").exists() and (a / "report" / "blocked.png").exists()
    result = CliRunner().invoke(app, ["report", str(a), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0 and (tmp_path / "r" / "permits.png").exists()
    assert CliRunner().invoke(app, ["report", str(tmp_path / "missing")]).exit_code == 1
