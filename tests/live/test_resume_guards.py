"""``platoon train --resume`` decides before it changes anything (docs/live-runtime.md, "Resume"): one writer, a
finished run left as it is, an unfinished end completed, a truncated log refused; and a broken part of a checkpoint
falls back alone (statistics from an older checkpoint, a lost dispatch state costs only its outstanding draws)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from live_harness import FakeService
from test_resume import SMALL, check_event_log, fake_service
from typer.testing import CliRunner

from platoon.cli import app
from platoon.live.launch import command
from platoon.live.training.checkpoint import LiveRunDir
from platoon.runs import RunBusyError, read_checkpoint_rows, read_jsonl
from platoon.runs.columnar import parse_npz
from platoon.runs.session import RunSession

runner = CliRunner()
FAST = {"progress": False, "service_factory": fake_service, "eval_episodes": 64}


def snapshot(run):
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != "writer.lock"}


def slow_service(model, cfg, version):
    service = FakeService(vocab=model.vocab_size, delay_s=0.2)  # groups still run while a step trains and saves
    service.version = version
    return service


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A 7-step run killed right after step 4's row: its newest checkpoint, 000004, has draws in flight; it keeps two
    recovery checkpoints."""
    run = tmp_path_factory.mktemp("killed") / "run"
    original = RunSession.write_row

    def dying(self, decision, outbox):
        original(self, decision, outbox)
        if decision.row["step"] == 4:
            raise KeyboardInterrupt("killed")

    RunSession.write_row = dying
    try:
        with pytest.raises(KeyboardInterrupt):
            # no evaluation before the kill: its rollouts share the slow service, and while they ran every group in
            # flight would settle
            command.train(None, [*SMALL, "train.max_training_steps=7", "checkpoint.keep_recovery=2", "eval.every=5"],
                          out=run, **{**FAST, "service_factory": slow_service})
    finally:
        RunSession.write_row = original
    return run


def copy_of(run, tmp_path):
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def starts(run):
    return [e for e in read_jsonl(run / "tasks" / "events.jsonl") if e["event"] == "start"]


def test_a_finished_run_says_so_and_a_run_killed_before_its_end_completes(tmp_path, capsys):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=6", "checkpoint.recovery_every=3"], out=run, **FAST)
    before = snapshot(run)
    assert command.train(resume=run, **FAST) == run  # it stalled and cut the final row before
    assert "is finished: its 6 steps are done" in capsys.readouterr().out
    assert snapshot(run) == before
    result = runner.invoke(app, ["train", "--resume", str(run)])
    assert result.exit_code == 0 and "--steps N (N > 6)" in result.output
    assert snapshot(run) == before

    # killed between its last checkpoint and its final evaluation: the resume writes the end, and only that
    row = read_checkpoint_rows(run)[-1]
    os.truncate(run / "metrics.jsonl", row["logs"]["metrics.jsonl"])
    lock = json.loads((run / "lock.json").read_text())
    (run / "lock.json").write_text(json.dumps({k: v for k, v in lock.items() if k != "finished"}))
    command.train(resume=run, **FAST)
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in metrics] == list(range(7)) and "eval/pass@1" in metrics[-1]
    assert json.loads((run / "lock.json").read_text())["finished"][-1]["steps"] == 6
    assert [e["start"] for e in starts(run)] == [1]  # no start trained anything more


def test_a_second_writer_is_refused(killed, tmp_path):
    run = copy_of(killed, tmp_path)
    held = LiveRunDir.claim(run)  # another `platoon train --resume` of the run, still running
    before = snapshot(run)
    with pytest.raises(RunBusyError, match=f"pid {os.getpid()} "):
        command.train(resume=run, **FAST)
    result = runner.invoke(app, ["train", "--resume", str(run)])
    assert result.exit_code == 64 and "another process is writing this run" in result.output
    assert snapshot(run) == before
    held.release()
    command.train(resume=run, **FAST)
    assert [e["start"] for e in starts(run)] == [1, 2]
    # retention (checkpoint.keep_recovery: 2): the launch and final checkpoints are kept for good, of the recovery
    # ones (every 2 steps, and the resumed start's launch save at 4) the newest two; each with its trainer.pt
    kept = ["000000", "000004", "000006", "000007"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == kept
    assert all((run / "checkpoints" / n / "trainer.pt").exists() for n in kept)


def test_a_deleted_event_log_is_refused(killed, tmp_path):
    run = copy_of(killed, tmp_path)
    (run / "tasks" / "events.jsonl").unlink()
    before = snapshot(run)
    with pytest.raises(command.TrainError, match=r"tasks/events\.jsonl is missing.*checkpoint 000004"):
        command.train(resume=run, steps=8, **FAST)
    assert snapshot(run) == before  # lock.json's steps included


def test_corrupt_statistics_fall_back_alone(killed, tmp_path):
    run = copy_of(killed, tmp_path)
    (run / "checkpoints" / "000004" / "tasks" / "state-000004.npz").write_bytes(b"PK\x03\x04 not a zip")
    command.train(resume=run, **FAST)
    (start,) = [e for e in starts(run) if e["start"] == 2]
    assert start["checkpoint"] == "000004" and start["batch"] == 4  # not 000002: no step is redone
    assert "tasks/state-000004.npz" in start["state_lost"]
    (lost,) = json.loads((run / "lock.json").read_text())["tasks_state_lost"]
    assert lost["checkpoint"] == "000004" and lost["loaded"] == "000002"
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(8))
    check_event_log(read_jsonl(run / "tasks" / "events.jsonl"), steps=7, batch_size=4)


def test_a_corrupt_dispatch_state_loses_only_the_outstanding_draws(killed, tmp_path):
    run = copy_of(killed, tmp_path)
    state = run / "checkpoints" / "000004" / "tasks" / "state-000004.npz"
    outstanding = parse_npz(state, state.read_bytes())["outstanding"]
    assert outstanding
    (run / "checkpoints" / "000004" / "tasks" / "dispatch-000004.json").write_text("{")
    command.train(resume=run, **FAST)
    events = read_jsonl(run / "tasks" / "events.jsonl")
    (start,) = [e for e in events if e["event"] == "start" and e["start"] == 2]
    assert start["checkpoint"] == "000004" and "dispatch-000004.json" in start["state_lost"]
    fates = {}
    for e in events:
        if e["event"] == "fate":
            fates.setdefault((e["start"], e["seq"]), []).append(e["fate"])
    assert all(fates[(s, q)] == ["lost"] for s, q, _, _ in outstanding)
    assert all(len(f) == 1 for f in fates.values())
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(8))


def test_a_checkpoint_without_statistics_records_its_reissues(killed, tmp_path):
    run = copy_of(killed, tmp_path)
    dispatch = json.loads((run / "checkpoints" / "000004" / "tasks" / "dispatch-000004.json").read_text())
    kept = {tuple(k) for k in (dispatch["kept"] or {}).get("groups", [])}
    assert any((s, q) not in kept for s, q, _, _ in dispatch["outstanding"])  # groups in flight: reissued
    path = run / "checkpoints.jsonl"  # as a start whose statistics had stopped writes it: no state file
    rows = read_jsonl(path)
    for row in rows:
        if row["name"] == "000004":
            row["files"].pop("tasks/state-000004.npz")
            row.pop("tasks")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "checkpoints" / "000004" / "tasks" / "state-000004.npz").unlink()
    command.train(resume=run, **FAST)
    events = read_jsonl(run / "tasks" / "events.jsonl")
    (start,) = [e for e in events if e["event"] == "start" and e["start"] == 2]
    assert start["checkpoint"] == "000004" and "holds no per-task statistics" in start["state_lost"]
    assert any("reissues" in e for e in events if e["event"] == "draw" and e["start"] == 2)
    check_event_log(events, steps=7, batch_size=4)
