"""``platoon eval RUN`` while ``platoon train`` writes RUN (its checkpoints saved and pruned under it): each eval
measures a checkpoint that reads back, and the run it read finishes every step once, undisturbed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from platoon.runs.jsonl import read_jsonl

pytestmark = [pytest.mark.live, pytest.mark.slow]
CONFIG = """\
environments:
  - service_kwargs: {ranges: [4, 8]}
train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 60, batch_size: 2, max_staleness: 1,
        workflow_config: {group_size: 2}}
checkpoint: {recovery_every: 1, keep_recovery: 1}
"""


def test_eval_of_a_run_being_trained_measures_a_checkpoint_and_leaves_the_run_whole(tmp_path):
    config, run = tmp_path / "run.yaml", tmp_path / "run"
    config.write_text(CONFIG)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    train = subprocess.Popen([sys.executable, "-m", "platoon", "train", str(config), "--out", str(run)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(read_jsonl(run / "checkpoints.jsonl")) < 3 and train.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    measured = []
    while train.poll() is None and len(measured) < 3:
        ev = subprocess.run([sys.executable, "-m", "platoon", "eval", str(run), "--n", "16"], env=env,
                            capture_output=True, text=True, timeout=300)
        assert ev.returncode == 0, ev.stderr[-3000:]
        measured.append(int(re.search(r"at step (\d+) \(checkpoint", ev.stdout).group(1)))
    _, stderr = train.communicate(timeout=300)
    assert train.returncode == 0, stderr[-3000:]
    assert measured and all(m > 0 for m in measured), measured
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl") if any(k.startswith("train/") for k in r)]
    assert steps == list(range(60))
