"""One embedded default: what ``platoon train`` runs without a config is what ``config show`` prints, and a file
made of it, one key changed, trains as the embedded default does with that key changed."""

from __future__ import annotations

import json

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
    # the same config ran (where its runs go aside) ...
    configs = [json.loads((tmp_path / run / "lock.json").read_text())["config"] for run in ("file", "embedded")]
    assert [{k: v for k, v in c.items() if k != "log_path"} for c in configs] == [
        {k: v for k, v in configs[1].items() if k != "log_path"}] * 2
    # ... and learned alike: the model service's batches form as rollouts arrive, so the last digits of a loss may
    # differ between two runs of one config
    ours, theirs = curve(tmp_path / "file"), curve(tmp_path / "embedded")
    assert len(ours) == len(theirs) == 4 and ours[-1][3] is not None
    for mine, other in zip(ours, theirs, strict=True):
        assert [m is None for m in mine] == [o is None for o in other]
        assert [m for m in mine if m is not None] == pytest.approx([o for o in other if o is not None], rel=0.05,
                                                                   abs=1e-3)


def test_train_says_its_messages_on_stderr_and_its_result_on_stdout(tmp_path):
    import subprocess
    import sys

    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "platoon", "train", "--out", str(run), *SMALL[:2], SMALL[3]],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == f"run directory: {run}\n"
    assert "info: the model service sends no routing ids" in proc.stderr and "step    0" in proc.stderr
