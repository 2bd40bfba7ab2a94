"""SIGTERM of ``platoon train`` inside a checkpoint's write (the live runtime writes it off the event loop, in a
thread): the run exits 1 saying how to go on, the half-written checkpoint is never read, and ``--resume`` ends the
run with every step once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from process_tree import SIGTERM_DURING_A_WRITE

from platoon.runs.jsonl import read_jsonl

pytestmark = [pytest.mark.live, pytest.mark.slow]
CONFIG = """\
environments:
  - service_kwargs: {ranges: [4, 8]}
train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 8, batch_size: 2,
        workflow_config: {group_size: 2}}
checkpoint: {recovery_every: 1}
"""
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("nth_write", [7])  # past the launch save, in a step's checkpoint
def test_sigterm_during_a_live_checkpoint_write_loses_nothing(tmp_path, nth_write):
    config, run = tmp_path / "run.yaml", tmp_path / "run"
    config.write_text(CONFIG)
    proc = subprocess.run([sys.executable, "-c", SIGTERM_DURING_A_WRITE, str(nth_write), "train", str(config),
                           "--out", str(run)], env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "terminated (SIGTERM); a run goes on from its last checkpoint with --resume" in proc.stderr
    resumed = subprocess.run([sys.executable, "-m", "platoon", "train", "--resume", str(run)], env=ENV,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl") if any(k.startswith("train/") for k in r)]
    assert steps == list(range(8))
