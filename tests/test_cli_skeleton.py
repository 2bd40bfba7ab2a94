"""The command line's shape and exit codes, through a real process (``python -m platoon``)."""

from __future__ import annotations

import os
import subprocess
import sys

COMMANDS = ("simulate", "train", "eval", "prestage", "config", "tasks", "env", "report")


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
