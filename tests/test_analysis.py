"""platoon.analysis: run directories as DataFrames, and the runnable example of docs/run-directory.md."""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import pytest

from platoon.analysis import FATES, compare_runs, load_run, tasks_frame
from platoon.runs import RunDir, metrics_row, save_checkpoint

DOC = Path(__file__).resolve().parents[1] / "docs" / "run-directory.md"


def write_run(path: Path, *, draws_scale: int = 1) -> RunDir:
    """A small run written with platoon.runs' writers: two starts, a resume that redoes step 2, a torn line."""
    run = RunDir.create(path)
    run.write_lock(
        {"train": {"batch_size": 2}}, [{"kind": "task_sampler", "ref": "auto"}], {"runtime": "sim"}
    )
    with run.metrics_writer() as m:
        m.write(metrics_row(0, 0.0, {"train/sampler/draws": 2 * draws_scale}))
        m.write(metrics_row(1, 10.0, {"train/sampler/draws": 4 * draws_scale, "train/trainer_idle_share": 0.5}))
        m.write(metrics_row(2, 20.0, {"train/sampler/draws": 100}))
    with open(run.metrics_path, "ab") as f:
        f.write(b'{"step":3,"time":3')  # the first start dies mid-line
    with run.events_writer() as e:
        e.write(
            {"event": "start", "start": 1, "batch": 0, "checkpoint": None, "state_lost": None, "loaded": None}
        )
        e.write(
            {
                "event": "draw",
                "start": 1,
                "seq": 0,
                "task_id": "t-a",
                "position": 0,
                "version": 0,
                "sampler": "auto",
                "reason": "order",
            }
        )
        e.write(
            {
                "event": "draw",
                "start": 1,
                "seq": 1,
                "task_id": "t-b",
                "position": 1,
                "version": 0,
                "sampler": "pass_rate",
                "reason": "explore",
                "score": 0.5,
            }
        )
        e.write(
            {
                "event": "draw",
                "start": 1,
                "seq": 2,
                "task_id": "t-a",
                "position": 2,
                "version": 0,
                "sampler": "auto",
                "reason": "order",
            }
        )
        e.write(
            {
                "event": "draw",
                "start": 1,
                "seq": 3,
                "task_id": "t-c",
                "position": 3,
                "version": 0,
                "sampler": "auto",
                "reason": "order",
            }
        )
        e.write(
            {
                "event": "settle",
                "start": 1,
                "seq": 0,
                "task_id": "t-a",
                "verdict": "trained",
                "valid": 4,
                "passes": 1,
                "version": 0,
            }
        )
        e.write(
            {
                "event": "settle",
                "start": 1,
                "seq": 1,
                "task_id": "t-b",
                "verdict": "uniform",
                "valid": 4,
                "passes": 4,
                "version": 0,
            }
        )
        e.write(
            {
                "event": "fate",
                "start": 1,
                "seq": 1,
                "fate": "rejected",
                "rule": "informative",
                "admission": "uniform",
            }
        )
        e.write({"event": "fate", "start": 1, "seq": 0, "fate": "consumed"})
    with run.events_writer() as e:
        e.write(
            {
                "event": "start",
                "start": 2,
                "batch": 2,
                "checkpoint": "000001",
                "state_lost": None,
                "loaded": "000001",
            }
        )
        e.write({"event": "fate", "start": 1, "seq": 3, "fate": "lost"})
        e.write(
            {
                "event": "draw",
                "start": 2,
                "seq": 0,
                "task_id": "t-a",
                "position": 2,
                "version": 1,
                "sampler": "auto",
                "reason": "reissue",
                "reissues": [1, 2],
            }
        )
        e.write(
            {
                "event": "settle",
                "start": 2,
                "seq": 0,
                "task_id": "t-a",
                "verdict": "trained",
                "valid": 3,
                "passes": 2,
                "version": 1,
            }
        )
        e.write({"event": "fate", "start": 2, "seq": 0, "fate": "consumed"})
    with run.metrics_writer() as m:  # the second start redoes step 2 and goes on
        m.write(metrics_row(2, 21.0, {"train/sampler/draws": 6 * draws_scale, "train/trainer_idle_share": 0.25}))
        m.write(metrics_row(3, 30.0, {"train/sampler/draws": None, "train/trainer_idle_share": 0.0}))
    save_checkpoint(run, 1, {"tasks/dispatch-000001.json": {"format": 2}}, {"policy_version": 1})
    save_checkpoint(run, 3, {"tasks/dispatch-000003.json": {"format": 2}}, {"policy_version": 3})
    return run


def test_metrics_one_row_per_step_last_row_wins(tmp_path):
    run = load_run(write_run(tmp_path / "demo").path)
    m = run.metrics
    assert list(m.columns) == ["step", "time", "train/sampler/draws", "train/trainer_idle_share"]
    assert m["step"].tolist() == [0, 1, 2, 3] and m["step"].dtype == "int64"
    assert m["time"].tolist() == [0.0, 10.0, 21.0, 30.0]
    assert m["train/sampler/draws"].tolist()[:3] == [2, 4, 6]
    assert math.isnan(m["train/sampler/draws"].iloc[3]) and math.isnan(m["train/trainer_idle_share"].iloc[0])


def test_events_checkpoints_and_lock(tmp_path):
    run = load_run(write_run(tmp_path / "demo").path)
    assert run.name == "demo" and run.path == tmp_path / "demo"
    assert run.runtime == "sim" and run.lock["config"] == {"train": {"batch_size": 2}}
    ev = run.events
    assert ev.columns[0] == "event" and len(ev) == 14
    assert ev["event"].value_counts().to_dict() == {"draw": 5, "fate": 4, "settle": 3, "start": 2}
    assert {"rule", "admission", "reissues", "score"} <= set(ev.columns)
    assert ev.loc[ev.event == "fate", "fate"].tolist() == ["rejected", "consumed", "lost", "consumed"]
    assert run.checkpoints["step"].tolist() == [1, 3]
    assert run.checkpoints["policy_version"].tolist() == [1, 3]
    assert list(run.checkpoints.columns[:5]) == ["step", "name", "path", "files", "time"]


def test_tasks_table_from_events(tmp_path):
    tasks = load_run(write_run(tmp_path / "demo").path).tasks
    assert list(tasks.columns) == ["task_id", "draws", "settles", "attempts", "passes"] + [
        f"fate_{f}" for f in FATES
    ]
    assert FATES == ("consumed", "stale", "failed", "skipped", "lost", "rejected")
    rows = {r["task_id"]: r for r in tasks.to_dict("records")}
    assert tasks["task_id"].tolist() == ["t-a", "t-b", "t-c"]
    # t-a: drawn twice in start 1; start 2's reissue of (1, 2) is the same draw, not a third
    assert rows["t-a"] == {
        "task_id": "t-a",
        "draws": 2,
        "settles": 2,
        "attempts": 7,
        "passes": 3,
        "fate_consumed": 2,
        "fate_stale": 0,
        "fate_failed": 0,
        "fate_skipped": 0,
        "fate_lost": 0,
        "fate_rejected": 0,
    }
    assert (rows["t-b"]["draws"], rows["t-b"]["passes"], rows["t-b"]["fate_rejected"]) == (1, 4, 1)
    assert (rows["t-c"]["settles"], rows["t-c"]["fate_lost"]) == (0, 1)
    assert all(tasks[c].dtype == "int64" for c in tasks.columns[1:])


def test_tasks_table_unknown_fates_and_orphans():
    events = [
        {"event": "draw", "start": 1, "seq": 0, "task_id": "x"},
        {"event": "fate", "start": 1, "seq": 0, "fate": "cancelled"},
        {"event": "fate", "start": 9, "seq": 9, "fate": "lost"},  # its draw is not in the log
        {"event": "settle", "start": 1, "seq": 0, "valid": 2, "passes": 1},  # task from its draw
    ]
    table = tasks_frame(events)
    assert table.columns[-1] == "fate_cancelled"
    assert table.to_dict("records") == [
        {
            "task_id": "x",
            "draws": 1,
            "settles": 1,
            "attempts": 2,
            "passes": 1,
            "fate_consumed": 0,
            "fate_stale": 0,
            "fate_failed": 0,
            "fate_skipped": 0,
            "fate_lost": 0,
            "fate_rejected": 0,
            "fate_cancelled": 1,
        }
    ]


def test_an_empty_run_directory_reads_as_empty_frames(tmp_path):
    run = load_run(RunDir.create(tmp_path / "empty").path)
    assert run.lock == {} and run.runtime is None
    assert list(run.metrics.columns) == ["step", "time"] and run.metrics.empty
    assert run.events.empty and run.checkpoints.empty and run.tasks.empty
    assert run.tasks.columns[0] == "task_id"
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        load_run(tmp_path / "nowhere")


def test_compare_runs(tmp_path):
    a = load_run(write_run(tmp_path / "a").path)
    b = load_run(write_run(tmp_path / "b", draws_scale=10).path)
    table = compare_runs([a, b], ["train/sampler/draws", "train/trainer_idle_share"])
    assert table.index.tolist() == ["a", "b"] and table.index.name == "run"
    assert list(table.columns) == [
        "steps",
        "train/sampler/draws:median",
        "train/sampler/draws:last",
        "train/trainer_idle_share:median",
        "train/trainer_idle_share:last",
    ]
    assert table.loc["a", "steps"] == 4
    assert table.loc["a", "train/sampler/draws:median"] == 4.0
    assert (
        table.loc["a", "train/sampler/draws:last"] == 6.0
    )  # step 3 logged null: the last number is step 2's
    assert table.loc["b", "train/sampler/draws:median"] == 40.0
    assert table.loc["a", "train/trainer_idle_share:median"] == 0.25 and table.loc["a", "train/trainer_idle_share:last"] == 0.0

    same_name = load_run(write_run(tmp_path / "other" / "a").path)
    assert compare_runs([a, same_name], ["train/trainer_idle_share"]).index.tolist() == [str(a.path), str(same_name.path)]
    with pytest.raises(KeyError, match="train/typo"):
        compare_runs([a], ["train/typo"])


def test_a_metric_only_one_run_logged_is_nan_for_the_other(tmp_path):
    a = load_run(write_run(tmp_path / "a").path)
    empty = load_run(RunDir.create(tmp_path / "e").path)
    table = compare_runs([a, empty], ["train/trainer_idle_share"])
    assert table.loc["e", "steps"] == 0 and math.isnan(table.loc["e", "train/trainer_idle_share:median"])


def test_the_docs_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/run-directory.md has no python example"
    write_run(tmp_path / "runs" / "demo")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), {})
    text = out.getvalue()
    assert text.startswith("0.4.0 4 steps\n")
    assert "{'explore': 1, 'order': 3, 'reissue': 1}" in text
    # the hardest task first: t-a passed 3 of 7
    hardest = [line.split() for line in text.splitlines() if line.strip().startswith("t-")][0]
    assert hardest[0] == "t-a" and float(hardest[2]) == pytest.approx(3 / 7, abs=1e-6)
    assert "train/sampler/draws:median" in text


def test_a_simulated_and_a_live_run_side_by_side(tmp_path):
    """The names of docs/metrics.md: those both runtimes write compare across them; a runtime's own are NaN for the
    other's run."""
    shared = ("rollout_client/permit_busy_share", "train/trainer_idle_share", "train/rollouts_per_hour")
    runs = []
    for runtime, own, scale in (("sim", "sim/gpu_hours", 1.0), ("live", "trainer/loss", 2.0)):
        rd = RunDir.create(tmp_path / runtime)
        rd.write_lock({}, [], {"runtime": runtime})
        with rd.metrics_writer() as m:
            for step in range(3):
                m.write(metrics_row(step, 10.0 * (step + 1), {**{k: 0.1 * scale * (step + 1) for k in shared},
                                                               own: float(step)}))
        runs.append(load_run(rd.path))
    assert [r.runtime for r in runs] == ["sim", "live"]
    table = compare_runs(runs, [*shared, "sim/gpu_hours", "trainer/loss"])
    for name in shared:
        assert table.loc["sim", f"{name}:median"] == pytest.approx(0.2)
        assert table.loc["live", f"{name}:last"] == pytest.approx(0.6)
    assert math.isnan(table.loc["live", "sim/gpu_hours:median"]) and table.loc["sim", "sim/gpu_hours:last"] == 2.0
    assert math.isnan(table.loc["sim", "trainer/loss:median"]) and table.loc["live", "trainer/loss:last"] == 2.0
