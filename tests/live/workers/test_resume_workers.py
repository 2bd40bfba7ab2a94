"""``SIGKILL`` of a ``platoon train`` whose rollouts run in worker processes, then ``--resume``: no step is lost, every
draw gets one fate, and the killed run's workers end and leave nothing in node-local scratch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from live_harness import check_event_log, train_then_sigkill

from platoon.runs import read_jsonl

pytestmark = [pytest.mark.live, pytest.mark.slow]

SETTINGS = ["train.batch_size=4", "environments.0.workflow_config.group_size=4", "checkpoint.recovery_every=2",
            "eval.every=8", "model.d_model=16", "model.n_layers=1", "train.workflow_config.rollout_isolation=process"]


def test_sigkill_of_a_run_with_rollout_workers_then_resume_loses_nothing(tmp_path):
    run, scratch = tmp_path / "run", tmp_path / "scratch"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PLATOON_NODE_SCRATCH": str(scratch)}
    train_then_sigkill(run, ["--steps", "8", *[a for s in SETTINGS for a in ("--set", s)]], env,
                       after_rows=4, within_s=240)
    metrics = run / "metrics.jsonl"
    done = len(read_jsonl(metrics))
    assert 4 <= done < 9

    resumed = subprocess.run([sys.executable, "-m", "platoon", "train", "--resume", str(run)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "rollout worker fork server" in resumed.stdout + resumed.stderr
    assert [r["step"] for r in read_jsonl(metrics)] == list(range(9))  # every step once, and the final evaluation
    events = read_jsonl(run / "tasks" / "events.jsonl")
    check_event_log(events, steps=8, batch_size=4)
    assert [e["start"] for e in events if e["event"] == "start"] == [1, 2]
    # the timeline still parses; a rollout's lane holds the spans it holds in process, its steps' timed in its worker
    trace = json.loads((run / "trace.json").read_text() + "]")
    assert {e["name"] for e in trace} >= {"rollout", "permit_wait", "startup", "model_call", "env_step", "batch"}
    for rollout in (e for e in trace if e["name"] == "rollout"):
        steps = [e for e in trace if e["name"] == "env_step" and e["tid"] == rollout["tid"]
                 and rollout["ts"] <= e["ts"] <= rollout["ts"] + rollout["dur"]]
        assert all(e["ts"] + e["dur"] <= rollout["ts"] + rollout["dur"] for e in steps)
    left = scratch / f"platoon-workers-{os.getuid()}"
    assert not left.exists() or list(left.iterdir()) == []  # the killed run's workers ended and removed their files
