"""One embedded default: what ``platoon train`` runs without a config is what ``config show`` prints, and a file
made of it, one key changed, trains as the embedded default does with that key changed."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from platoon.cli import app
from platoon.runs.jsonl import read_jsonl

pytestmark = pytest.mark.live
runner = CliRunner()
SMALL = ["--steps", "3", "eval.at_start=false", "environments.0.service_kwargs.ranges=[4, 8]"]
CHANGED = "train.optimizer.learning_rate=0.002"


def curve(run) -> list[tuple]:
    return [(r["step"], r.get("trainer/loss"), r.get("train/reward_mean"), r.get("eval/pass@1"))
            for r in read_jsonl(run / "metrics.jsonl")]


@pytest.mark.parametrize("how", [["--defaults"], []])
def test_the_shown_default_changed_in_one_key_trains_as_the_embedded_default(tmp_path, how):
    shown = runner.invoke(app, ["config", "show", *how])
    assert shown.exit_code == 0
    config = tmp_path / "my-run.yaml"
    config.write_text(shown.stdout)
    assert runner.invoke(app, ["config", "validate", "--strict", str(config)]).exit_code == 0
    embedded = runner.invoke(app, ["train", "--out", str(tmp_path / "embedded"), *SMALL, CHANGED])
    from_file = runner.invoke(app, ["train", str(config), "--out", str(tmp_path / "file"), *SMALL, CHANGED])
    assert embedded.exit_code == from_file.exit_code == 0, embedded.output + from_file.output
    assert "no effect" not in from_file.output  # nothing of the file is warned about
    ours = curve(tmp_path / "file")
    assert ours == curve(tmp_path / "embedded") and len(ours) == 4 and ours[-1][3] is not None


def test_train_says_its_messages_on_stderr_and_its_result_on_stdout(tmp_path):
    import subprocess
    import sys

    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "platoon", "train", "--out", str(run), *SMALL[:2], SMALL[3]],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == f"run directory: {run}\n"
    assert "info: the model service sends no routing ids" in proc.stderr and "step    0" in proc.stderr
