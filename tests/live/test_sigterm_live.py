"""SIGTERM of ``platoon train`` inside a checkpoint's write (the live runtime writes it off the event loop, in a
thread): the run exits 1 saying how to go on, the half-written checkpoint is never read, and ``--resume`` ends the
run with every step once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

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
    assert re.search(r"terminated \(SIGTERM\); saved: checkpoint \d{6} \(step \d+\) in \S+; go on with: "
                     r"platoon train --resume \S+", proc.stderr), proc.stderr[-2000:]
    resumed = subprocess.run([sys.executable, "-m", "platoon", "train", "--resume", str(run)], env=ENV,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl") if any(k.startswith("train/") for k in r)]
    assert steps == list(range(8))


def hear_ctrl_c() -> None:
    """A terminal's Ctrl-C reaches the child even where this test runs as a background job (``make test`` starts
    its parts with ``&``), whose shell left SIGINT ignored, an ignoring every child inherits."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_says_what_was_saved_and_how_to_go_on(tmp_path):
    config, run = tmp_path / "run.yaml", tmp_path / "run"
    config.write_text(CONFIG)
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "train", str(config), "--out", str(run)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=hear_ctrl_c)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(read_jsonl(run / "metrics.jsonl")) >= 2 if (run / "metrics.jsonl").exists() else False:
            break
        time.sleep(0.01)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    said = re.search(r"interrupted; saved: checkpoint (\d{6}) \(step (\d+)\) in (\S+); go on with: platoon train "
                     r"--resume (\S+)", err)
    assert said and said.group(3) == said.group(4) == str(run), err[-2000:]
    assert (run / "checkpoints" / said.group(1)).is_dir()
