"""A live run's trackers (``stats.loggers``): ``platoon train`` SIGKILLed mid-run, then resumed, continues the same
TensorBoard, W&B (offline) and MLflow runs, each step once; the tags say the time axis is the wall clock."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import tracker_readback as readback
from live_harness import train_then_sigkill

from platoon.runs import read_jsonl

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _every_tracker_opened(run) -> bool:
    """Each tracker opens its run on a thread of its own (MLflow's SQLite store takes seconds on a loaded machine):
    a kill before a tracker has a run leaves it nothing to continue, so the test kills only once all have one."""
    try:
        kept = json.loads((run / "trackers.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return all(kept.get(name, {}).get("rows", 0) > 0 for name in ("tensorboard", "wandb", "mlflow"))


def test_a_killed_and_resumed_live_run_logs_each_step_once_to_the_same_tracker_runs(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "WANDB_API_KEY": "", "NETRC": "/nonexistent", "PYTHONUNBUFFERED": "1"}
    train_then_sigkill(run, ["--steps", "8", "--set", "train.batch_size=8", "--set", "checkpoint.recovery_every=2",
                             "--set", "eval.every=4", "--set", "stats.loggers=[tensorboard,wandb,mlflow]"],
                       env, after_rows=4, within_s=180, ready=_every_tracker_opened)
    before = json.loads((run / "trackers.json").read_text())
    killed_rows = read_jsonl(run / "metrics.jsonl")
    resumed = subprocess.run([sys.executable, "-m", "platoon", "train", "--resume", str(run)], capture_output=True,
                             text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads((run / "trackers.json").read_text())
    assert after["wandb"]["run_id"] == before["wandb"]["run_id"]
    assert after["mlflow"]["run_id"] == before["mlflow"]["run_id"]
    want = readback.expected(run)
    first: dict[str, dict[int, float]] = {}  # the killed start's values: a row it wrote again keeps, in a tracker
    for row in killed_rows:                  # that took it before the kill, the value it got first
        for k, v in row.items():
            if k != "step" and isinstance(v, int | float):
                first.setdefault(k, {})[row["step"]] = float(v)
    tb, text = readback.tensorboard(run)
    wb = readback.wandb_history(run)
    ml = readback.mlflow_history(run, after["mlflow"]["run_id"])
    assert text.startswith("platoon live run; time: wall-clock seconds")
    for held in (tb, wb, {k: ml[readback._mlflow_name(k)] for k in want if readback._mlflow_name(k) in ml}):
        assert [s for s, _ in held["time"]] == [s for s, _ in want["time"]]  # every row once, in order
        for name, got in held.items():
            final = dict(want.get(name, []))
            steps = [s for s, _ in got]
            assert steps == sorted(set(steps)), name  # no step twice
            assert all(any(math.isclose(v, w, rel_tol=1e-6) for w in (final.get(s), first.get(name, {}).get(s))
                           if w is not None) for s, v in got), name
    rows = len(read_jsonl(run / "metrics.jsonl"))
    assert {after[k]["rows"] for k in ("tensorboard", "wandb", "mlflow")} == {rows}


def test_a_resume_of_a_finished_live_run_sends_a_tracker_the_rows_it_lacks(tmp_path):
    # a run whose tracker lacks rows at its end (its close timed out, or a kill came while it caught up) is finished:
    # train --resume runs no step, says what it sent, and the tracker holds every row. Here the event files are lost.
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    train = [sys.executable, "-m", "platoon", "train"]
    done = subprocess.run([*train, "--steps", "2", "--out", str(run), "--set", "train.batch_size=8",
                           "--set", "stats.loggers=[tensorboard]"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import shutil

    shutil.rmtree(run / "tensorboard")
    (run / "trackers.json").write_text(json.dumps({"format": 1, "group": None}))
    metrics = (run / "metrics.jsonl").read_bytes()
    resumed = subprocess.run([*train, "--resume", str(run)], capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0 and "is finished: its 2 steps are done" in resumed.stdout, resumed.stderr[-3000:]
    assert (run / "metrics.jsonl").read_bytes() == metrics
    tb, _ = readback.tensorboard(run)
    assert [s for s, _ in tb["time"]] == [s for s, _ in readback.expected(run)["time"]]
    assert json.loads((run / "trackers.json").read_text())["tensorboard"]["rows"] == len(read_jsonl(run / "metrics.jsonl"))
