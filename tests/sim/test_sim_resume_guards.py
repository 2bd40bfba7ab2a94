"""What ``platoon simulate --resume`` (and ``train --resume`` of a simulated run) decides before it changes anything
(docs/run-directory.md, "Resuming a run"): one writer, a finished run left as it is, the other runtime's run and too
few steps refused with exit 64, a truncated log refused; and retention of checkpoints (docs/simulator.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from typer.testing import CliRunner

from platoon.cli import app
from platoon.runs import load_latest_checkpoint, read_checkpoint_rows, read_jsonl

runner = CliRunner()
SMALL = ["--preset", "textcraft-synth", "--set", "train.batch_size=4", "--set", "train.max_concurrent_rollouts=32",
         "--set", "checkpoint.recovery_every=2"]


def simulated(tmp_path, steps=4, name="run"):
    out = tmp_path / name
    result = runner.invoke(app, ["simulate", *SMALL, "--steps", str(steps), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def snapshot(run):
    """Every file of the run directory but the writer lock's, by relative name."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != "writer.lock"}


def test_a_resume_of_a_run_that_another_process_writes_is_refused(tmp_path):
    out = tmp_path / "busy"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "simulate", *SMALL, "--steps", "100000", "--out",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(read_checkpoint_rows(out)) < 2:  # a step or two is done
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.02)
        for command in (["simulate", "--resume", str(out), "--steps", "3"],
                        ["train", "--resume", str(out), "--steps", "9"]):
            result = runner.invoke(app, command)
            assert result.exit_code == 64, (command, result.output)
            assert "another process is writing this run" in result.output and f"pid {proc.pid} " in result.output
        assert proc.poll() is None  # the writer goes on, alone
    finally:
        proc.kill()
        proc.wait()
    # the writer was killed: its lock went with it, and the next resume names it as a writer that did not release
    rows = read_checkpoint_rows(out)
    result = runner.invoke(app, ["simulate", "--resume", str(out), "--steps", str(rows[-1]["step"] + 1)])
    assert result.exit_code == 0, result.output
    assert f"the last writer (pid {proc.pid} " in result.output and "ended without releasing" in result.output


def test_a_finished_run_says_so_and_is_left_as_it_is(tmp_path):
    run = simulated(tmp_path)
    before = snapshot(run)
    assert json.loads((run / "lock.json").read_text())["finished"][-1]["steps"] == 4
    for extra in ([], ["--steps", "4"]):
        result = runner.invoke(app, ["simulate", "--resume", str(run), *extra])
        assert result.exit_code == 0, result.output
        assert "is finished: its 4 steps are done" in result.output and "--steps N" in result.output
        assert snapshot(run) == before
    result = runner.invoke(app, ["simulate", "--resume", str(run), "--steps", "6"])  # extending it goes on
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "train/rollouts" in r] == list(range(6))
    assert json.loads((run / "lock.json").read_text())["finished"][-1]["steps"] == 6


def test_misused_resumes_exit_64_and_change_nothing(tmp_path):
    run = simulated(tmp_path)
    before = snapshot(run)
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "6"])  # not a live run
    assert result.exit_code == 64, result.output
    assert "is a simulated run" in result.output and "platoon simulate --resume" in result.output
    result = runner.invoke(app, ["simulate", "--resume", str(run), "--steps", "2"])
    assert result.exit_code == 64 and "has already done 4 steps" in result.output
    result = runner.invoke(app, ["train", "--resume", str(run), "--set", "train.max_training_steps=6"])
    assert result.exit_code == 64 and "--resume takes the run's own config" in result.output
    assert snapshot(run) == before  # lock.json's runtime and steps included
    result = runner.invoke(app, ["simulate", "--resume", str(run)])
    assert result.exit_code == 0 and "is finished" in result.output  # still the 4-step run it was

    live = tmp_path / "as-live"  # a live run's lock, as train writes it
    live.mkdir()
    for name, data in before.items():
        (live / name).parent.mkdir(parents=True, exist_ok=True)
        (live / name).write_bytes(data)
    lock = json.loads((live / "lock.json").read_text())
    (live / "lock.json").write_text(json.dumps({**lock, "runtime": "live"}))
    result = runner.invoke(app, ["simulate", "--resume", str(live), "--steps", "6"])
    assert result.exit_code == 64 and "is a live run" in result.output and "platoon train --resume" in result.output


def test_a_log_shorter_than_its_checkpoint_recorded_is_refused(tmp_path):
    run = simulated(tmp_path)
    row = read_checkpoint_rows(run)[-1]
    for name, damage in (("metrics.jsonl", lambda p: os.truncate(p, row["logs"]["metrics.jsonl"] // 2)),
                         ("tasks/events.jsonl", lambda p: p.unlink())):
        copy = tmp_path / f"damaged-{name.replace('/', '-')}"
        subprocess.run(["cp", "-a", str(run), str(copy)], check=True)
        damage(copy / name)
        before = snapshot(copy)
        result = runner.invoke(app, ["simulate", "--resume", str(copy), "--steps", "6"])
        assert result.exit_code == 1, result.output
        assert name in result.output and f"checkpoint {row['name']}" in result.output
        assert snapshot(copy) == before


def test_retention_keeps_the_newest_checkpoints_and_a_resume_falls_back_among_them(tmp_path):
    # recovery checkpoints every 2 steps, the preset keeps the newest 3 of them (checkpoint.keep_recovery); the
    # launch (0) and final (10) checkpoints are permanent and never pruned
    run = simulated(tmp_path, steps=10)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["000000", "000004", "000006", "000008",
                                                                      "000010"]
    rows = read_checkpoint_rows(run)
    assert [r["step"] for r in rows] == [0, 2, 4, 6, 8, 10]
    assert [r["permanent"] for r in rows] == [True, False, False, False, False, True]
    assert [r.get("pruned") for r in rows] == [None, None, None, None, ["000002"], None]
    newest = run / "checkpoints" / "000010" / "tasks" / "dispatch-000010.json"
    newest.write_text("{}")
    loaded = load_latest_checkpoint(run)
    assert loaded.step == 8 and len(loaded.passed_over) == 1  # the pruned rows are skipped without a note
    result = runner.invoke(app, ["simulate", "--resume", str(run), "--steps", "12"])
    assert result.exit_code == 0, result.output
    # step 10 saved again is no longer the final one: a recovery checkpoint, whose save prunes 000004
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["000000", "000006", "000008", "000010",
                                                                      "000012"]
    assert read_checkpoint_rows(run)[-2].get("pruned") == ["000004"]
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "train/rollouts" in r] == list(range(12))


def test_config_show_defaults_lists_the_retention():
    result = runner.invoke(app, ["config", "show", "--defaults"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "keep_recovery: 3")
    assert lines[at - 1].strip().startswith("# Recovery checkpoints to keep, the newest")


def test_a_checkpoint_of_an_earlier_release_is_refused_naming_it_and_the_run_is_left_as_it_was(tmp_path, monkeypatch):
    from platoon.sim import run as sim_run

    run = simulated(tmp_path, steps=2)
    before = snapshot(run)
    monkeypatch.setattr(sim_run, "DRIVER_STATE_FORMAT", 99)  # this release's format, as a later release sees it
    result = runner.invoke(app, ["simulate", "--resume", str(run), "--steps", "4"])
    assert result.exit_code == 64
    assert f"{run}/checkpoints/000002: written by an earlier release of platoon (driver state format 2" in result.output
    assert "Traceback" not in result.output and snapshot(run) == before
