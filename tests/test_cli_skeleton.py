"""The command line's shape and exit codes, through a real process (``python -m platoon``)."""

from __future__ import annotations

import os
import subprocess
import sys

COMMANDS = ("simulate", "train", "sft", "eval", "prestage", "config", "tasks", "env", "report", "trace",
            "calibrate")


def platoon(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "platoon", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_help_lists_every_command():
    result = platoon("--help")
    assert result.returncode == 0, result.stderr
    listed = {line.strip(" │|").split()[0] for line in result.stdout.splitlines() if line.strip(" │|")}
    missing = [c for c in COMMANDS if c not in listed]
    assert not missing, f"--help does not list {missing}:\n{result.stdout}"


def test_an_unknown_option_is_a_usage_error_exit_64():
    result = platoon("--no-such-option")
    assert result.returncode == 64
    assert "No such option: --no-such-option" in result.stderr
    assert "Traceback" not in result.stderr

    result = platoon("simulate", "--nope")
    assert result.returncode == 64 and "No such option: --nope" in result.stderr


def test_a_missing_argument_and_an_unknown_command_are_usage_errors():
    result = platoon("report")
    assert result.returncode == 64 and "Missing argument" in result.stderr
    result = platoon("frobnicate")
    assert result.returncode == 64 and "frobnicate" in result.stderr


def test_version():
    from platoon import __version__

    result = platoon("--version")
    assert result.returncode == 0 and result.stdout == f"platoon {__version__}\n"


def test_a_path_that_is_no_run_is_a_usage_error_naming_it(tmp_path):
    (tmp_path / "empty").mkdir()
    for command in ("train", "simulate", "sft"):
        result = platoon(command, "--resume", str(tmp_path / "empty"))
        assert result.returncode == 64, result.stderr
        assert result.stderr == f"platoon: --resume {tmp_path / 'empty'}: not a run directory (no lock.json)\n"
    result = platoon("train", "--resume", str(tmp_path / "nowhere"))
    assert (result.returncode, result.stderr) == (64, f"platoon: --resume {tmp_path / 'nowhere'}: no such directory\n")


def test_an_out_that_holds_files_is_a_usage_error(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    for command in ("train", "sft", "simulate"):
        result = platoon(command, "--out", str(tmp_path / "taken"), "--steps", "1")
        assert result.returncode == 64, result.stderr
        assert "exists and is not empty" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


def test_a_key_written_outside_its_section_names_the_section():
    result = platoon("train", "model_name=tiny", "learning_rate=0.1", "--steps", "1")
    assert result.returncode == 78
    assert "model_name: unknown key; did you mean 'train.model_name'?" in result.stderr
    assert "learning_rate: unknown key; did you mean 'train.optimizer.learning_rate'?" in result.stderr


def test_eval_of_a_simulated_run_says_it_has_no_policy(tmp_path):
    assert platoon("simulate", "--steps", "1", "--out", str(tmp_path / "sim")).returncode == 0
    result = platoon("eval", str(tmp_path / "sim"))
    assert result.returncode == 64
    assert "a simulated run has no policy to play" in result.stderr and "Traceback" not in result.stderr
