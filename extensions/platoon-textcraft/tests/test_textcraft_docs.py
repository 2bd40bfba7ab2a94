"""docs/textcraft.md's examples, run as written: the listing it shows, its config and commands, its Python."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from platoon.cli import app

DOC = Path(__file__).resolve().parents[3] / "docs" / "textcraft.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_listing_it_shows_is_what_env_list_prints() -> None:
    [shown] = blocks("text")
    printed = CliRunner().invoke(app, ["env", "list"]).output
    listed = ("NAME", "textcraft", "platoon-number-search")  # the whole listing, the built-in's row too
    ours = [line for line in shown.splitlines() if line.startswith(listed)]
    assert ours == [line for line in printed.splitlines() if line.startswith(listed)] and len(ours) == 4


def test_its_config_and_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = blocks("yaml")[0]  # "In a run"'s (the chat model's, later, needs a checkpoint: tests/live)
    Path("textcraft.yaml").write_text(config)
    commands = [line[2:] for block in blocks("console") for line in block.splitlines() if line.startswith("$ ")]
    assert len(commands) == 3
    for command in commands:
        argv = shlex.split(command)
        result = CliRunner().invoke(app, argv[1:])
        assert result.exit_code == 0, f"{command}\n{result.output}"
    assert (tmp_path / "runs/textcraft-sim/tasks/pool.json").exists()


def test_its_python_runs(capsys: pytest.CaptureFixture[str]) -> None:
    [code] = blocks("python")
    exec(compile(code, str(DOC), "exec"), {})
    assert "Outcome(reward=1.0, success=True" in capsys.readouterr().out
