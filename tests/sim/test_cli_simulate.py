"""``platoon simulate`` on the command line: a preset run, resume, sweeps, and its exit codes."""

from __future__ import annotations

import sys

import pytest
from simkit import deterministic
from typer.testing import CliRunner

from platoon.cli import app, main
from platoon.runs import read_jsonl

runner = CliRunner()
SMALL = ["--preset", "textcraft-synth", "--set", "train.batch_size=4", "--set", "train.max_concurrent_rollouts=32"]


def exit_code(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["platoon", *args])
    with pytest.raises(SystemExit) as info:
        main()
    return info.value.code, capsys.readouterr().err


def step_rows(path):
    return [r for r in read_jsonl(path / "metrics.jsonl") if "train/rollouts" in r]


def test_a_preset_run_prints_its_summary(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["simulate", *SMALL, "--steps", "3", "--seed", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for label in ("steps", "time (h)", "throughput (rollouts/h)", "permit busy share", "trainer idle share",
                  "staleness", "informative share", "stale groups", "rejected groups", "pass@1 last"):
        assert label in result.output
    assert [r["step"] for r in step_rows(out)] == [0, 1, 2]
    lock = (out / "lock.json").read_text()
    assert '"seed":5' in lock and '"preset":"textcraft-synth"' in lock


def test_resume_goes_on_to_the_new_total(tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, ["simulate", *SMALL, "--steps", "2", "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["simulate", "--resume", str(out), "--steps", "4"])
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in step_rows(out)] == [0, 1, 2, 3]


def test_exit_codes(monkeypatch, capsys, tmp_path):
    (tmp_path / "bad.yaml").write_text("train: {model_name: tiny, renderer_name: role_colon, max_training_steps: -1}\n"
                                       "sim: {rollout: {error_rate: 3}}\n")
    code, err = exit_code(monkeypatch, capsys, "simulate", str(tmp_path / "bad.yaml"))
    assert code == 78
    assert "train.max_training_steps" in err and "sim.rollout.error_rate" in err and "Traceback" not in err
    code, err = exit_code(monkeypatch, capsys, "simulate", "--preset", "nope")
    assert code == 78 and "unknown preset 'nope'" in err
    code, err = exit_code(monkeypatch, capsys, "simulate", "--permit-release", "sometimes")
    assert code == 64
    code, err = exit_code(monkeypatch, capsys, "simulate", "--resume", str(tmp_path), "--set", "train.max_training_steps=3")
    assert code == 64 and "drop overrides" in err
    code, err = exit_code(monkeypatch, capsys, "simulate", "--resume", str(tmp_path), "train.max_training_steps=3")
    assert code == 64 and "drop overrides" in err
    code, err = exit_code(monkeypatch, capsys, "simulate", "--resume", str(tmp_path))
    assert code == 64 and "not a run directory (no lock.json)" in err
    code, err = exit_code(monkeypatch, capsys, "simulate", "--preset", "math", "--similar-by", "range")
    assert code == 64 and "--similar-by goes with --like" in err


def test_an_existing_out_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("")
    result = runner.invoke(app, ["simulate", *SMALL, "--steps", "1", "--out", str(tmp_path / "run")])
    assert result.exit_code == 64


def test_a_sweep_prints_one_table_with_ratios(tmp_path):
    out = tmp_path / "sweep"
    result = runner.invoke(app, ["simulate", *SMALL, "--steps", "2", "--out", str(out), "--jobs", "2",
                                 "--sweep", "train.permit_release=rollout,group",
                                 "--sweep", "train.max_staleness=1,2"])
    assert result.exit_code == 0, result.output
    points = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert points == ["00-permit_release=rollout,max_staleness=1", "01-permit_release=rollout,max_staleness=2",
                      "02-permit_release=group,max_staleness=1", "03-permit_release=group,max_staleness=2"]
    for p in points:
        assert len(step_rows(out / p)) == 2
    table = (out / "sweep.md").read_text()
    assert table.count("\n") == 2 + 4
    assert "x)" in table.splitlines()[3]  # ratios against the first point


def test_a_sweep_checks_every_point_first(tmp_path):
    result = runner.invoke(app, ["simulate", *SMALL, "--out", str(tmp_path / "s"),
                                 "--sweep", "train.max_staleness=1,-3"])
    assert result.exit_code == 78 and "max_staleness" in result.output
    assert not (tmp_path / "s").exists()


def test_the_hash_seed_changes_nothing(tmp_path):
    """Two processes with different string hashing write the same logs (no set or dict-of-set order leaks in)."""
    import os
    import subprocess

    outs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-m", "platoon", "simulate", *SMALL, "--steps", "4",
                               "--set", "train.task_sampler=pass_rate", "--set", "train.group_admission=informative",
                               "--out", str(out)], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        outs.append(out)
    for name in ("metrics.jsonl", "tasks/events.jsonl"):
        assert deterministic(outs[0] / name) == deterministic(outs[1] / name)


def test_messages_go_to_stderr_and_the_result_to_stdout(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "platoon", "simulate", "--steps", "2", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "info: " in proc.stderr and "info: " not in proc.stdout and "warning: " not in proc.stdout
    assert "platoon simulate" in proc.stdout and "throughput" in proc.stdout  # the summary is the result


def test_groups_that_all_fail_stop_the_run_as_live_does_and_it_resumes_from_its_last_checkpoint(
        monkeypatch, capsys, tmp_path):
    """``error_rate`` 1.0: every group fails, step 0 consumes 64 of them, and the 128th failed in a row (the
    streak's limit, two batches of 64) stops the run with live's words and exit code (``platoon train``: exit 1,
    ``platoon: the run stopped at step ...``). Its launch checkpoint stands: ``--resume`` goes on from it and, the
    run being exact, stops at the same point again."""
    out = tmp_path / "run"
    args = ["simulate", "--preset", "math", "--steps", "40", "--set", "sim.rollout.error_rate=1.0"]
    code, err = exit_code(monkeypatch, capsys, *args, "--out", str(out))
    said = " ".join(err.split())
    assert code == 1, err
    assert ("platoon: the run stopped at step 1: its last 128 groups all failed, so no step could train on anything; "
            "the last: group (1, ") in said
    assert "failed: RolloutRaised: rollout " in said and "as sim.rollout.error_rate (1.0) has it" in said
    assert said.endswith("Fix the environment, then go on from the last checkpoint with --resume")
    assert "Traceback" not in err and "(t=" not in said
    assert [r["step"] for r in step_rows(out)] == [0]
    assert [r["name"] for r in read_jsonl(out / "checkpoints.jsonl")] == ["000000"]
    settles = [e for e in read_jsonl(out / "tasks/events.jsonl") if e["event"] == "settle"]
    assert len(settles) >= 128 and {e["verdict"] for e in settles} == {"failed"}
    first = deterministic(out / "metrics.jsonl"), (out / "tasks/events.jsonl").read_bytes()

    code, again = exit_code(monkeypatch, capsys, "simulate", "--resume", str(out))
    assert code == 1, again
    assert "resuming" in again and "from checkpoint 000000" in again
    assert said.split("platoon: ")[-1] == " ".join(again.split()).split("platoon: ")[-1]
    assert (deterministic(out / "metrics.jsonl"), (out / "tasks/events.jsonl").read_bytes()) == first
