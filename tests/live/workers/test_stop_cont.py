"""SIGSTOP and SIGCONT of a run with rollout workers: the trainer alone (a debugger, a scheduler's preemption) or its
whole process group (Ctrl-Z, then ``fg``). Stopped, nothing moves; continued, the run finishes every step once and
ends every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from process_tree import tree_of, wait_gone

from platoon.runs.jsonl import read_jsonl

pytestmark = [pytest.mark.live, pytest.mark.slow]
CONFIG = """\
environments:
  - service_kwargs: {ranges: [4, 8]}
train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 6, batch_size: 2,
        workflow_config: {group_size: 2, rollout_isolation: process}}
"""


@pytest.mark.parametrize("whole_group", [True], ids=["process-group"])  # the trainer alone: the same path, 15 s more CI
def test_a_stopped_then_continued_run_finishes_every_step_once_and_leaves_no_process(tmp_path, whole_group):
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG)
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "train", str(config), "--out", str(run)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not read_jsonl(run / "metrics.jsonl") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    started = tree_of(proc.pid)
    stop = (lambda sig: os.killpg(proc.pid, sig)) if whole_group else (lambda sig: proc.send_signal(sig))
    stop(signal.SIGSTOP)
    rows = len(read_jsonl(run / "metrics.jsonl"))
    time.sleep(3)
    assert len(read_jsonl(run / "metrics.jsonl")) == rows  # stopped: no step went on
    stop(signal.SIGCONT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl") if any(k.startswith("train/") for k in r)]
    assert steps == list(range(6))
    assert started, "the run had started its rollout workers"
    left, _ = wait_gone(started, within_s=30)
    assert left == [], {pid: started[pid] for pid in left}
