"""``platoon train --resume``: a run that died goes on from its last full checkpoint, loses no step, and its event
log holds every group once (docs/dispatch.md): in process (a run that raises mid-training, a corrupt newest checkpoint)
and for real (``SIGKILL`` of a ``platoon train`` subprocess)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from live_harness import FakeService, check_event_log, die_after_row, train_then_sigkill

from platoon.live.launch import command
from platoon.runs import read_checkpoint_rows, read_jsonl

SMALL = ["environments.0.workflow_config.group_size=4", "environments.0.service_kwargs={ranges: [4, 8]}",
         "train.batch_size=4", "checkpoint.recovery_every=2", "eval.every=3", "model.d_model=16", "model.n_layers=1"]


def fake_service(model, cfg, version):
    service = FakeService(vocab=model.vocab_size)
    service.version = version
    return service


def test_a_run_that_dies_mid_training_resumes_without_losing_a_step(tmp_path, monkeypatch):
    run = tmp_path / "run"
    die_after_row(monkeypatch, 4)  # right after step 4's metrics (its checkpoint: 000004)
    with pytest.raises(KeyboardInterrupt):
        command.train(None, [*SMALL, "train.max_training_steps=7"], out=run, progress=False, service_factory=fake_service, eval_episodes=64)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    assert [r["step"] for r in read_checkpoint_rows(run)] == [0, 2, 4]

    command.train(resume=run, progress=False, service_factory=fake_service, eval_episodes=64)
    metrics = read_jsonl(run / "metrics.jsonl")
    # checkpoint 000004 (4 steps done) follows step 3's row: step 4's row, written after it, is cut, step 4 trains
    # again and is logged once; the last row is the final policy's evaluation
    assert [r["step"] for r in metrics] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert "eval/pass@1" in metrics[-1] and "eval/pass@1" in metrics[0] and "eval/pass@1" in metrics[3]
    events = read_jsonl(run / "tasks" / "events.jsonl")
    starts = [e for e in events if e["event"] == "start"]
    assert [(e["start"], e["batch"], e["checkpoint"]) for e in starts] == [(1, 0, None), (2, 4, "000004")]
    check_event_log(events, steps=7, batch_size=4)
    rows = read_checkpoint_rows(run)
    assert [(r["step"], r["start"]) for r in rows] == [(0, 1), (2, 1), (4, 1), (4, 2), (6, 2), (7, 2)]
    # the resumed start's clock goes on from checkpoint 000004's: the time column never drops, and each checkpoint
    # records the run's clock at or after every row logged before it
    times = [r["time"] for r in metrics]
    assert times == sorted(times) and times[4] >= rows[2]["clock_s"] >= times[3]
    assert [r["clock_s"] for r in rows] == sorted(r["clock_s"] for r in rows)


def test_a_checkpoint_row_without_a_clock_resumes_with_the_clock_at_0(tmp_path):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=2"], out=run, progress=False, service_factory=fake_service, eval_episodes=64)
    path = run / "checkpoints.jsonl"
    rows = read_jsonl(path)
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "clock_s"}) + "\n" for r in rows))
    assert command.LiveRunDir(run).resume_point().clock_s == 0.0  # as platoon 0.4.0 wrote it
    command.train(resume=run, steps=4, progress=False, service_factory=fake_service, eval_episodes=64)
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [0, 1, 2, 3, 4]
    # the old behaviour: the resumed start's clock began at 0, so its launch save comes before step 1's row
    (launch,) = [r for r in read_checkpoint_rows(run) if r["start"] == 2 and r["step"] == 2]
    assert launch["clock_s"] < metrics[1]["time"]


def test_a_checkpoint_clock_that_is_not_seconds_is_a_note_and_the_clock_begins_at_0(tmp_path):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=2"], out=run, progress=False, service_factory=fake_service, eval_episodes=64)
    path = run / "checkpoints.jsonl"
    rows = read_jsonl(path)
    rows[-1]["clock_s"] = "soon"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    point = command.LiveRunDir(run).resume_point()
    assert point.clock_s == 0.0 and any("clock_s 'soon' is not a number of seconds" in n for n in point.notes)


def test_a_corrupt_newest_checkpoint_is_passed_over_with_a_note(tmp_path, capsys):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=4"], out=run, progress=False, service_factory=fake_service, eval_episodes=64)
    newest = run / "checkpoints" / "000004" / "trainer.pt"
    newest.write_bytes(b"not the trainer")
    path = command.train(resume=run, steps=6, progress=False, service_factory=fake_service, eval_episodes=64)
    assert path == run
    assert "passed over checkpoint 000004" in capsys.readouterr().err
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [0, 1, 2, 3, 4, 5, 6]  # from 000002: steps 2 and 3 again, once each
    check_event_log(read_jsonl(run / "tasks" / "events.jsonl"), steps=6, batch_size=4)
    lock = json.loads((run / "lock.json").read_text())
    assert lock["config"]["train"]["max_training_steps"] == lock["steps"] == 6


def test_resume_refuses_fewer_steps_than_its_checkpoint_did(tmp_path):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=2"], out=run, progress=False, service_factory=fake_service, eval_episodes=64)
    with pytest.raises(command.TrainError, match="has already done 2 steps"):
        command.train(resume=run, steps=1, progress=False, service_factory=fake_service, eval_episodes=64)


def test_a_resumed_trainer_goes_on_from_its_weights(tmp_path):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=2"], out=run, progress=False, service_factory=fake_service, eval_episodes=64)
    # the run finished its 2 steps, and a finished run is not resumed as it is (test_runs_resume.py): a new total
    live, _, name = command.resume_run(run, steps=3, service_factory=fake_service, eval_episodes=64)
    saved = command.LiveRunDir(run).resume_point()
    from platoon.live.training.trainer import loads_state

    state = loads_state(saved.trainer_state)
    assert name == "000002" and live.trainer.steps == state["steps"] == 2
    for key, tensor in live.model.state_dict().items():
        assert tensor.equal(state["model"][key])
    assert live.service.version == 2 and live.dispatcher.step == 2 and live.dispatcher.start_number == 2


# -- the real thing ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigkill_mid_training_then_resume(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = train_then_sigkill(run, ["--steps", "12", "--set", "train.batch_size=16", "--set",
                                    "checkpoint.recovery_every=3", "--set", "eval.every=4"],
                              env, after_rows=5, within_s=120)
    metrics = run / "metrics.jsonl"
    done = [r["step"] for r in read_jsonl(metrics)]
    assert 5 <= len(done) < 12 and proc.returncode == -signal.SIGKILL

    resumed = subprocess.run([sys.executable, "-m", "platoon", "train", "--resume", str(run)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    said = re.search(r"resuming \S+ from checkpoint (\d{6}) \(step (\d+)\)(; steps? (\d+)(?:-(\d+))?, done after "
                     r"it, run again)?", resumed.stderr)
    assert said, resumed.stderr[-2000:]
    start = int(said.group(2))
    assert said.group(1) == f"{start:06d}" and start % 3 == 0
    redone = sorted({s for s in done if s >= start})  # the rows the kill left past the checkpoint
    assert (said.group(3) is not None) == bool(redone)
    if redone:
        assert int(said.group(4)) == redone[0] and int(said.group(5) or said.group(4)) == redone[-1]
    rows = read_jsonl(metrics)
    steps = [r["step"] for r in rows]
    assert steps == list(range(13)), steps  # every step once, and the final evaluation
    times = [r["time"] for r in rows]
    assert times == sorted(times), times  # the resumed start's clock went on from its checkpoint's
    events = read_jsonl(run / "tasks" / "events.jsonl")
    check_event_log(events, steps=12, batch_size=16)
    starts = [e for e in events if e["event"] == "start"]
    assert [e["start"] for e in starts] == [1, 2] and starts[1]["checkpoint"] is not None
    assert Path(run / "checkpoints" / "000012" / "trainer.pt").exists()
    # the timeline still parses (the kill lost what was buffered, the resume cut back to the checkpoint) and its
    # train spans cover each step once
    trace = json.loads((run / "trace.json").read_text() + "]")
    assert sorted(e["args"]["step"] for e in trace if e.get("name") == "train") == list(range(12))
    assert {e["name"] for e in trace} >= {"publish", "eval", "batch", "rollout", "model_call", "env_step"}


def test_a_resume_whose_sampling_changed_says_so_and_records_it(tmp_path):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=2"], out=run, progress=False, service_factory=fake_service, eval_episodes=64)
    lock_path = run / "lock.json"
    lock = json.loads(lock_path.read_text())
    lock["config"]["train"]["task_sampler"] = "pass_rate"  # as if the user resumed under another sampler
    lock_path.write_text(json.dumps(lock))
    said = []
    command.resume_run(run, steps=3, log=lambda level, message: said.append((level, message)), service_factory=fake_service,
                       eval_episodes=64)
    assert any(level == "warning" and "the sampling changed since checkpoint 000002" in m for level, m in said)
    (changed,) = json.loads(lock_path.read_text())["sampling_changed"]
    assert changed["checkpoint"] == "000002" and "train.task_sampler: auto -> pass_rate" in changed["changes"]
