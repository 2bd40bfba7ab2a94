"""docs/simulator.md's examples, run as written (in a fresh directory, in the order the guide gives them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from platoon.cli import app
from platoon.runs import read_jsonl
from platoon.sim.setup import entry_sims, load_sim_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.slow
def test_every_command_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    [csv] = blocks("csv")
    Path("population.csv").write_text(csv)
    commands = [line[2:] for block in blocks("console") for line in block.splitlines() if line.startswith("$ ")]
    assert len(commands) >= 8
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "platoon"
        result = CliRunner().invoke(app, argv[1:])
        assert result.exit_code == 0, f"{command}\n{result.output}"
    assert (tmp_path / "runs/compare/summary.md").exists()
    assert len([p for p in (tmp_path / "runs/sweep").iterdir() if p.is_dir()]) == 4
    steps = [r["step"] for r in read_jsonl(tmp_path / "runs/tc/metrics.jsonl") if "train/rollouts" in r]
    assert steps == list(range(14))  # the resume went on to its new total
    drawn = {e["task_id"] for e in read_jsonl(tmp_path / "runs/known-pass-rate/tasks/events.jsonl")
             if e["event"] == "draw"}
    assert drawn <= {"easy-1", "easy-2", "mid-1", "mid-2", "hard-1", "hard-2"}


def test_the_example_config_runs(tmp_path):
    [yaml_text] = blocks("yaml")
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text)
    cfg = load_sim_config(path, overrides=["train.max_training_steps=6"])
    swe, quick = entry_sims(cfg)
    assert swe.rollout.duration.dist == "lognormal" and quick.rollout.duration.dist == "exponential"
    assert quick.rollout.first_call_s is None and swe.rollout.startup_capacity == 16
    assert quick.population.difficulty_mean == -1.0 and quick.trainer == swe.trainer
    from platoon.sim.run import SimRun

    SimRun.create(cfg, tmp_path / "run", log=lambda level, message: None).run()
    rows = read_jsonl(tmp_path / "run/metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(7))  # 6 steps and the final evaluation
    assert "rollout_client/start_limit/starting_mean" in rows[0]
    assert any(k.startswith("train/batch/environment/quick/") for k in rows[0])


def test_the_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    [code] = blocks("python")
    namespace: dict = {"__name__": "simulator_guide"}
    exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the guide's own example
    shares = namespace["results"]
    assert set(shares) == {"group", "rollout"}
    assert all(0 < s["permit_busy_share"] <= 1 for s in shares.values())
