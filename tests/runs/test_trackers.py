"""Trackers (``stats.loggers``, ``platoon.runs.trackers``): every row of ``metrics.jsonl`` reaches TensorBoard, W&B
(offline) and MLflow, read back with each one's own library; a SIGKILL and a resume log each step once; a sweep's
points are one group; a finished run's resume sends a tracker the rows it lacks; a tracker that fails is said once and the run goes on; a logger without its package is
refused at validation, naming its extra."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tracker_readback as readback
from process_tree import reap_tree, tree_of

from platoon.runs import read_jsonl
from platoon.runs.trackers import TrackedRun, Trackers

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")

ALL = "stats.loggers=[tensorboard,wandb,mlflow]"
QUIET = {**os.environ, "WANDB_API_KEY": "", "NETRC": "/nonexistent", "WANDB_SILENT": "true"}


def simulate(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "platoon", "simulate", *args], capture_output=True, text=True,
                          env={**QUIET, **(env or {})}, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return proc


HOST_TIMED = ("decision_ms", "decision_ms_max")
"""A simulated run's one figure that depends on the host, the sampler's (docs/metrics.md): a replay measures it
again."""


def same_as_metrics(run: Path, *, replayed: bool = False) -> None:
    """Each tracker holds exactly the rows of metrics.jsonl: the same names, steps and values, each step once (after
    a replay, the host-timed figures of the rows it wrote again keep their first values)."""
    want = readback.expected(run)
    assert all(len({s for s, _ in points}) == len(points) for points in want.values())  # a step once a metric
    tb, _ = readback.tensorboard(run)
    state = json.loads((run / "trackers.json").read_text())
    held = {"tensorboard": tb, "wandb": readback.wandb_history(run),
            "mlflow": readback.mlflow_history(run, state["mlflow"]["run_id"])}
    for tracker, got in held.items():
        names = {readback._mlflow_name(k): k for k in want} if tracker == "mlflow" else {k: k for k in want}
        assert got.keys() == names.keys(), tracker
        for name, points in got.items():
            metric = names[name]
            assert [s for s, _ in points] == [s for s, _ in want[metric]], (tracker, metric)
            if replayed and metric.rsplit("/", 1)[-1] in HOST_TIMED:
                continue
            assert all(math.isclose(a, b, rel_tol=1e-6 if tracker == "tensorboard" else 0.0, abs_tol=1e-30)
                       for (_, a), (_, b) in zip(points, want[metric], strict=True)), (tracker, metric)
    rows = len(read_jsonl(run / "metrics.jsonl"))
    assert {state[k]["rows"] for k in ("tensorboard", "wandb", "mlflow")} == {rows}


def test_a_simulated_run_s_rows_reach_every_tracker_with_its_config_and_tags(tmp_path):
    run = tmp_path / "run"
    proc = simulate(ALL, "train.max_training_steps=12", "--out", str(run))
    assert "W&B: no credentials found" in proc.stdout + proc.stderr
    same_as_metrics(run)
    lock = json.loads((run / "lock.json").read_text())["config"]
    _, text = readback.tensorboard(run)
    assert text.startswith("platoon sim run; time: simulated seconds") and '"max_training_steps": 12' in text
    (wandb_run,) = [r.run for r in readback.wandb_records(run) if r.WhichOneof("record_type") == "run"]
    assert list(wandb_run.tags) == ["simulated", "time:simulated"] and wandb_run.project == "platoon_tinker"
    config = {item.key: json.loads(item.value_json) for item in wandb_run.config.update if item.key != "_wandb"}
    assert config["train"]["max_training_steps"] == 12 and config.keys() == lock.keys()
    from mlflow.tracking import MlflowClient

    state = json.loads((run / "trackers.json").read_text())
    got = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}").get_run(state["mlflow"]["run_id"])
    assert got.data.params["train.max_training_steps"] == "12" and got.data.tags["platoon.runtime"] == "sim"
    assert got.data.tags["platoon.time"] == "simulated seconds" and got.info.status == "FINISHED"
    assert "eval/pass_at_1" in got.data.metrics  # MLflow refuses '@'


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_sigkill_and_a_resume_log_each_step_once_and_leave_no_tracker_process(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "simulate", ALL, "checkpoint.recovery_every=5",
                             "--out", str(run)], env=QUIET, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tree: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            # a process seen alive keeps its command line (an exited, unreaped one reads as ''): under load a slow
            # tracker may still be catching up when the others have ended, after the run's last step
            tree.update({pid: cmd for pid, cmd in tree_of(proc.pid).items() if cmd or pid not in tree})
            state = json.loads((run / "trackers.json").read_text()) if (run / "trackers.json").exists() else {}
            if all(state.get(k, {}).get("rows", 0) >= 60 for k in ("tensorboard", "wandb", "mlflow")):
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert any("wandb-core" in cmd for cmd in tree.values()), tree
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    left, _ = reap_tree(tree, 15.0)
    assert left == [], f"still running after the kill: {[tree[p] for p in left]}"
    before = json.loads((run / "trackers.json").read_text())
    simulate("--resume", str(run))
    after = json.loads((run / "trackers.json").read_text())
    assert {k: v["run_id"] for k, v in after.items() if k in ("wandb", "mlflow")} == {
        k: v["run_id"] for k, v in before.items() if k in ("wandb", "mlflow")}  # the same tracker runs, continued
    same_as_metrics(run, replayed=True)  # a simulated replay writes the same rows: each step once, the same values


def test_a_resume_of_a_finished_run_sends_a_tracker_the_rows_it_lacks_and_runs_no_step(tmp_path):
    # a run killed (or whose close timed out) while a slow tracker caught up after the last step is finished: its
    # resume runs nothing, but the tracker still gets its rows. Here MLflow's store is lost after the run ends.
    run = tmp_path / "run"
    simulate("stats.loggers=[tensorboard,mlflow]", "train.max_training_steps=12", "--out", str(run))
    (run / "mlflow.db").unlink()
    state = json.loads((run / "trackers.json").read_text())
    del state["mlflow"]
    (run / "trackers.json").write_text(json.dumps(state))
    metrics = (run / "metrics.jsonl").read_bytes()
    proc = simulate("--resume", str(run))
    assert "is finished: its 12 steps are done" in proc.stdout, proc.stdout + proc.stderr
    assert (run / "metrics.jsonl").read_bytes() == metrics  # no step run again
    state = json.loads((run / "trackers.json").read_text())
    rows = len(read_jsonl(run / "metrics.jsonl"))
    assert state["mlflow"]["rows"] == state["tensorboard"]["rows"] == rows
    got = readback.mlflow_history(run, state["mlflow"]["run_id"])
    assert got.keys() == {readback._mlflow_name(k) for k in readback.expected(run)}
    assert [s for s, _ in got["time"]] == [s for s, _ in readback.expected(run)["time"]]
    # once every tracker holds every row, a resume of the finished run opens none of them
    simulate("--resume", str(run))
    assert json.loads((run / "trackers.json").read_text()) == state


def test_a_sweep_s_points_are_one_group_named_by_the_sweep(tmp_path):
    sweep = tmp_path / "sweep-a"
    simulate("stats.loggers=[wandb,mlflow]", "train.max_training_steps=4", "--sweep", "train.max_staleness=1,2",
             "--out", str(sweep), "--jobs", "2")
    from mlflow.tracking import MlflowClient

    points = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(points) == 2
    for point in points:
        (wandb_run,) = [r.run for r in readback.wandb_records(point) if r.WhichOneof("record_type") == "run"]
        assert wandb_run.run_group == "sweep-a" and wandb_run.display_name == point.name
        state = json.loads((point / "trackers.json").read_text())
        client = MlflowClient(tracking_uri=f"sqlite:///{point / 'mlflow.db'}")
        got = client.get_run(state["mlflow"]["run_id"])
        assert client.get_experiment(got.info.experiment_id).name == "sweep-a"
        assert got.info.run_name == point.name and got.data.tags["platoon.sweep"] == "sweep-a"


def test_a_tracker_that_cannot_be_reached_is_said_once_and_the_run_goes_on(tmp_path):
    run = tmp_path / "run"
    proc = simulate("stats.loggers=[tensorboard,mlflow]", "stats.mlflow.tracking_uri=http://127.0.0.1:9",
                    "stats.close_timeout_seconds=30", "train.max_training_steps=12", "--out", str(run),
                    env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})  # refused at once, not after MLflow's backoff
    said = proc.stdout + proc.stderr
    assert said.count("tracker mlflow could not start") == 1, said[-3000:]
    rows = read_jsonl(run / "metrics.jsonl")
    assert rows[-1]["step"] == 12  # every step, every row
    tb, _ = readback.tensorboard(run)
    assert len(tb["time"]) == sum("time" in r for r in rows)


def wait_until(condition, timeout_s: float = 30.0) -> None:
    """Return once ``condition()`` holds (the lanes are threads), failing the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the trackers' lanes did not take the rows in time"
        time.sleep(0.005)


class Scripted:
    """A tracker that takes batches of rows whole until a batch would carry it past ``fail_at`` rows (then it raises,
    taking none of that batch, as ``Tracker.log`` says), recording what it took."""

    def __init__(self, name: str, fail_at: int | None = None) -> None:
        self.name, self.fail_at, self.took, self.closed = name, fail_at, [], False

    def open(self, run, kept, log):
        return {"run_id": kept.get("run_id", "r-1")}

    def log(self, rows):
        if self.fail_at is not None and len(self.took) + len(rows) > self.fail_at:
            raise OSError("No space left on device")
        self.took.extend(rows)

    def close(self):
        self.closed = True


def test_a_tracker_that_fails_mid_run_is_said_once_and_the_next_start_sends_it_the_rows_it_missed(tmp_path):
    said = []
    run = TrackedRun(tmp_path, "live", "e", "r", None, {"a": 1})
    rows = [{"step": i, "time": float(i), "loss": 1.0 / (i + 1)} for i in range(1, 9)]
    failing, steady = Scripted("mlflow", fail_at=3), Scripted("tensorboard")
    first = Trackers(run, [failing, steady], {}, [], log=lambda level, m: said.append((level, m)), close_timeout_s=10)
    for n, row in enumerate(rows[:6], start=1):  # one row a batch: each lane takes a row before the next comes
        first.write(row)
        wait_until(lambda n=n: len(steady.took) == n and len(failing.took) == min(n, 3))
    first.close()
    assert [lvl for lvl, m in said if "tracker mlflow stopped taking rows (OSError: No space" in m] == ["warning"]
    assert len(steady.took) == 6 and len(failing.took) == 3 and steady.closed and not failing.closed
    kept = json.loads((tmp_path / "trackers.json").read_text())
    assert kept["mlflow"]["rows"] == 3 and kept["tensorboard"]["rows"] == 6
    # the next start: metrics.jsonl holds the 6 rows; each tracker gets what it lacks, then the new rows, once
    again, steady_again = Scripted("mlflow"), Scripted("tensorboard")
    backlog = [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in rows[:6]]
    second = Trackers(run, [again, steady_again], kept, backlog, log=lambda level, m: said.append((level, m)),
                      close_timeout_s=10)
    for row in rows[6:]:
        second.write(row)
    second.close()
    assert [s for s, _ in again.took] == [4, 5, 6, 7, 8] and [s for s, _ in steady_again.took] == [7, 8]


def test_a_slow_tracker_never_holds_up_the_run_and_its_end_is_bounded(tmp_path):
    class Stuck(Scripted):
        def log(self, rows):
            time.sleep(30)

    said = []
    trackers = Trackers(TrackedRun(tmp_path, "sim", "e", "r", None, {}), [Stuck("mlflow")], {}, [],
                        log=lambda level, m: said.append(m), close_timeout_s=0.5)
    began = time.monotonic()
    for i in range(100):
        trackers.write({"step": i, "time": 0.0})
    trackers.close()
    assert time.monotonic() - began < 5
    assert any("trackers: still busy after 0.5 s (mlflow: 100 row(s) not taken)" in m for m in said), said
