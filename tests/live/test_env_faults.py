"""Environments that go wrong (tests/live/fault_env.py), run with ``platoon train``: each fault ends clearly (its exit
code, a message naming the environment, the task, the tool) and a resume goes on with nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from platoon.cli import app

pytestmark = pytest.mark.live
runner = CliRunner()
HERE = Path(__file__).parent
HOURS_S = 36_000


def config(tmp_path: Path, steps: int = 2, *, workflow: dict | None = None, **kwargs) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "environments": [{"env": "fault_env:Faulty", "service_kwargs": kwargs, "workflow_config": {"group_size": 2}}],
        "train": {"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": steps,
                  "batch_size": 2, "workflow_config": workflow or {}},
    }))
    return path


def train(*args: str):
    return runner.invoke(app, ["train", *args])


def steps_of(run: Path) -> list[int]:
    """The steps of the run's rows (not its final evaluation's)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row["step"] for row in rows if any(k.startswith("train/") for k in row)]


def test_a_tool_that_raises_fails_its_group_with_a_warning_naming_the_entry_task_tool_and_environment(tmp_path):
    result = train(str(config(tmp_path, mode="raise")), "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert "of entry 'default' (task t" in result.output
    assert "ValueError: the game server said 500 (raised by tool 'say' of fault_env:Faulty)" in result.output


def test_an_environment_that_is_down_stops_the_run_and_a_resume_goes_on_once_it_is_up(tmp_path):
    """Every group fails while the server is down: the run stops (exit 1) after the failure limit, naming the
    environment, the task and the error, instead of training steps on nothing; back up, ``--resume`` finishes the
    plan with every step once."""
    down = tmp_path / "down"
    down.touch()
    run = tmp_path / "run"
    result = train(str(config(tmp_path, steps=8, mode="down", down_file=str(down))), "--out", str(run))
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "groups all failed" in said and "--resume" in said
    assert "ConnectionError: no game for t" in said and "raised by fault_env:Faulty setting up an episode" in said
    down.unlink()
    result = train("--resume", str(run))
    assert result.exit_code == 0, result.output
    assert steps_of(run) == list(range(8))


@pytest.mark.parametrize("mode", ["hang", "hang_async"])
def test_a_tool_call_past_step_timeout_fails_its_rollout_and_the_run_goes_on(tmp_path, mode):
    """A call that blocks (``time.sleep`` for hours) or awaits for hours is stopped at ``step_timeout``."""
    began = time.monotonic()
    result = train(str(config(tmp_path, mode=mode, workflow={"rollout_config": {"step_timeout": 0.5}})),
                   "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert "ToolTimeout: tool 'say' ran past rollout_config.step_timeout (0.5 s)" in " ".join(result.output.split())
    assert steps_of(tmp_path / "run") == [0, 1]
    assert time.monotonic() - began < 120


@pytest.mark.slow
def test_a_hanging_tool_call_in_a_rollout_worker_is_stopped_at_step_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))  # the workers import fault_env too
    workflow = {"rollout_config": {"step_timeout": 0.5}, "rollout_isolation": "process"}
    result = train(str(config(tmp_path, mode="hang", workflow=workflow)), "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert "ToolTimeout: tool 'say' ran past" in " ".join(result.output.split())


@pytest.mark.parametrize(("mode", "said"), [
    ("big", None), ("unicode", None),
    ("none", "TypeError: tool 'say' of fault_env:Faulty returned NoneType, not a ToolResult with text"),
    ("nan", "ValueError: an outcome's reward must lie in [0, 1], got nan (raised by fault_env:Faulty grading task t"),
])
def test_odd_tool_results_are_cut_mended_or_refused_by_name(tmp_path, mode, said):
    """10 MB comes to the model cut to ``max_result_chars``; a lone surrogate as U+FFFD; None, or a NaN grade, fails
    the group with a warning that says where. The run finishes either way."""
    result = train(str(config(tmp_path, mode=mode)), "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert steps_of(tmp_path / "run") == [0, 1]
    if said is not None:
        assert said in " ".join(result.output.split())
    else:
        assert "failed" not in result.output


def test_an_environment_that_lists_a_task_twice_is_refused_naming_it(tmp_path):
    result = train(str(config(tmp_path, mode="dup")), "--out", str(tmp_path / "run"))
    assert result.exit_code == 78, result.output
    assert "environments.0.env: fault_env:Faulty lists task ids more than once ('t1'" in result.output


def test_an_environment_whose_constructor_raises_exits_1_naming_it_and_the_error(tmp_path):
    result = train(str(config(tmp_path, mode="ctor")), "--out", str(tmp_path / "run"))
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "environment 'fault_env:Faulty' (environments.0, entry 'default') could not be built" in said
    assert "ConnectionError: cannot reach the game server" in said and "internal error" not in said


def test_a_slow_constructor_is_said_and_a_sigterm_during_it_ends_clearly_leaving_no_run(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "train", str(config(tmp_path, ctor_s=HOURS_S)),
                             "--out", str(run)], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    said = proc.stderr.readline()  # blocks until the notice (5 s into the constructor)
    proc.send_signal(signal.SIGTERM)
    err = said + proc.communicate(timeout=60)[1]
    assert said == ("info: building environment 'fault_env:Faulty' (environments.0, entry 'default'): still running "
                    "after 5 s\n"), err
    assert proc.returncode == 1 and "terminated (SIGTERM)" in err and "Traceback" not in err, err
    assert not run.exists()  # a new run is made once its environments are built: nothing half-made to resume


@pytest.mark.slow
def test_a_quarter_million_tasks_train_and_resume(tmp_path):
    """(A million: 22 s to start and 1.1 GB, measured by hand; docs/writing-a-text-environment.md, "Faults".)"""
    run = tmp_path / "run"
    assert train(str(config(tmp_path, steps=2, n=250_000)), "--out", str(run), "--steps", "1").exit_code == 0
    result = train("--resume", str(run), "--steps", "2")
    assert result.exit_code == 0, result.output
    assert steps_of(run) == [0, 1]
